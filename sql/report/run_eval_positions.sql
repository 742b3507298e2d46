-- out: run_eval_positions
-- grain: trace_id, pos
-- reads: eval_positions
-- params: $run_id VARCHAR
-- One run's eval positions (its choice and outcome at each), in trace and position order: what
-- `specdraft compare` lines up against another run's.
select
    trace_id,
    pos,
    completion_pos,
    source,
    ctx_len,
    accepted,
    oracle_accepted
from eval_positions
where run_id = $run_id
order by trace_id, pos
