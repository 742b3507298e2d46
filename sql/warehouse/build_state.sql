-- out: build_state
-- grain: stage, built_at
-- reads: (parameters only)
-- params: $stage VARCHAR, $build_key VARCHAR
-- One row each time a stage's tables are built: what they were built from. The latest row per
-- stage says whether a rerun can reuse them.
select
    $stage::varchar as stage,
    $build_key::varchar as build_key,
    now() as built_at
