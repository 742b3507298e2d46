-- out: dataset_history
-- grain: name, ingested_at
-- reads: dataset_versions
-- params: $name VARCHAR
-- Every catalog row of a dataset, oldest first: its traces and source (what catch_up compares
-- with the traces file's versions).
select
    traces,
    source
from main.dataset_versions
where name = $name
order by ingested_at
