-- out: trace_acceptance
-- grain: trace_id
-- reads: eval_positions
-- params: $run_id VARCHAR
-- One run's eval traces: positions, mean accepted and the oracle's mean (the trace browser's list).
select
    trace_id,
    count(*) as positions,
    avg(accepted) as mean_accepted,
    avg(oracle_accepted) as mean_oracle_accepted
from eval_positions
where run_id = $run_id
group by trace_id
order by trace_id
