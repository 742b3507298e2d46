-- out: run_results
-- grain: run_id
-- reads: runs
-- params: $run_id VARCHAR
-- A recorded run's results JSON: the named run, or the latest when run_id is empty.
select
    results::varchar as results
from runs
where run_id = $run_id or $run_id = ''
order by created_at desc
limit 1
