-- out: replay_drafts
-- grain: trace_id, pos
-- reads: eval_positions, candidates
-- params: $run_id VARCHAR
-- The run's chosen draft at each of its eval positions (null where no source proposed one),
-- with what it accepted: what the live drafter must propose there.
select
    e.trace_id,
    e.pos,
    e.source,
    e.accepted,
    c.draft
from eval_positions as e
left join candidates as c on c.trace_id = e.trace_id and c.pos = e.pos and c.source = e.source
where e.run_id = $run_id
order by e.trace_id, e.pos
