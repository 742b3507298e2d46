-- out: dataset_run_config
-- grain: (one row, or none before the dataset's first run)
-- reads: runs
-- params: $name VARCHAR
-- The settings (results.json's config) of the dataset's latest run: what `specdraft lookup`
-- looks its text up with.
select
    config
from main.runs
where dataset = $name
order by created_at desc, run_id desc
limit 1
