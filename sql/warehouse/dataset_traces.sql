-- out: dataset_traces
-- grain: (one row)
-- reads: datasets
-- params: $name VARCHAR
-- How many traces the catalog says a dataset has (after its latest ingest or append).
select
    traces
from main.datasets
where name = $name
