-- out: replay_second_drafts
-- grain: trace_id, pos
-- reads: eval_positions, candidates
-- params: $run_id VARCHAR
-- The choice a run made at each of its eval positions after a chained token (eval_positions'
-- second_source: the draft that follows the first token of a chained pick at the position
-- before, where that token is the trace's), in replay_drafts' order; where the run recorded none
-- (runs before the chain model), the position's own choice.
select
    e.trace_id,
    e.pos,
    coalesce(s.draft, c.draft) as second_draft
from eval_positions as e
left join candidates as c on c.trace_id = e.trace_id and c.pos = e.pos and c.source = e.source
left join candidates as s on s.trace_id = e.trace_id and s.pos = e.pos and s.source = e.second_source
where e.run_id = $run_id
order by e.trace_id, e.pos
