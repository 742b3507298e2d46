-- out: run_positions
-- grain: position_bucket
-- reads: acceptance_by_position
-- params: $run_id VARCHAR
-- One run's acceptance by response position, for its report.
select
    position_bucket,
    positions,
    avg_accepted,
    avg_oracle_accepted
from acceptance_by_position
where run_id = $run_id
order by position_bucket
