-- out: dataset_versions
-- grain: name, ingested_at
-- reads: (parameters only)
-- params: $name VARCHAR, $traces_path VARCHAR, $tokenizer VARCHAR, $tokenizer_fingerprint VARCHAR, $source VARCHAR, $traces BIGINT
-- The catalog, one row each time a dataset is (re)ingested; the datasets view shows the latest.
select
    $name::varchar as name,
    $traces_path::varchar as traces_path,
    $tokenizer::varchar as tokenizer,
    $tokenizer_fingerprint::varchar as tokenizer_fingerprint,
    $source::varchar as source,
    $traces::bigint as traces,
    now() as ingested_at
