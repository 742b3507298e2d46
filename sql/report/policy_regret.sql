-- out: policy_regret
-- grain: run_id, trace_id, pos
-- reads: eval_positions
-- params: (none)
-- (a view) Positions where another draft would have done better than the chosen one: the policy's
-- regret, oracle_accepted - accepted.
select
    run_id,
    trace_id,
    pos,
    completion_pos,
    source,
    accepted,
    oracle_accepted,
    oracle_accepted - accepted as regret
from eval_positions
where oracle_accepted > accepted
