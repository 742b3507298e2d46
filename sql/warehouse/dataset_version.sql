-- out: dataset_version
-- grain: (one row)
-- reads: dataset_versions
-- params: $name VARCHAR
-- The catalog's latest row for a dataset (its latest ingest or append): traces and source.
select
    traces,
    source
from main.dataset_versions
where name = $name
order by ingested_at desc
limit 1
