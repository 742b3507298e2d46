-- out: runs
-- grain: run_id
-- reads: (parameters only)
-- params: $run_id VARCHAR, $dataset VARCHAR, $preset VARCHAR, $tokenizer VARCHAR, $config VARCHAR, $results VARCHAR
-- One row per evaluated run: its settings and results as JSON, and the headline numbers as
-- columns, so runs can be compared in SQL.
select
    $run_id::varchar as run_id,
    now() as created_at,
    $dataset::varchar as dataset,
    $preset::varchar as preset,
    $tokenizer::varchar as tokenizer,
    $config::json as config,
    $results::json as results,
    ($results::json ->> '$.selected.avg_accepted')::double as selected_avg_accepted,
    ($results::json ->> '$.oracle_best.avg_accepted')::double as oracle_best_avg_accepted,
    ($results::json ->> '$.decode_step.avg_accepted')::double as decode_step_avg_accepted,
    ($results::json ->> '$.selected.positions')::bigint as eval_positions
