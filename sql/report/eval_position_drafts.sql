-- out: eval_position_drafts
-- grain: run_id, trace_id, pos, source
-- reads: eval_positions, candidates, run_builds, build_state
-- params: (none)
-- (a view) Every source's draft at each eval position of a run, beside the run's choice: which
-- source was chosen, what each draft (with its context length and count) would have accepted.
-- Only the runs that chose from the candidates the warehouse holds: a later build replaces them,
-- and an older run's choices beside them contradicted its own figures.
select
    e.run_id,
    e.trace_id,
    e.pos,
    e.completion_pos,
    e.source as chosen_source,
    e.accepted as chosen_accepted,
    e.oracle_accepted,
    c.source,
    c.ctx_len,
    c.count,
    c.draft,
    c.accepted
from eval_positions as e
join candidates as c on c.trace_id = e.trace_id and c.pos = e.pos
where e.run_id in (
    select run_id
    from run_builds
    where stage = 'candidates'
        and build_key = (select build_key from build_state where stage = 'candidates' order by built_at desc limit 1)
)
