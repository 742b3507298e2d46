-- out: run_build_keys
-- grain: stage
-- reads: run_builds
-- params: $run_id VARCHAR
-- The build key of each kept stage's tables a run used (pipeline.stale_stages compares them with
-- build_state's latest).
select
    stage,
    build_key
from run_builds
where run_id = $run_id
