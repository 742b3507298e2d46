-- out: latest_dataset
-- grain: (one row)
-- reads: dataset_versions
-- params: (none)
-- The most recently ingested dataset: `specdraft sql`'s default schema.
select
    name
from main.dataset_versions
order by ingested_at desc
limit 1
