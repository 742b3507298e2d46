-- out: datasets
-- grain: name
-- reads: dataset_versions
-- params: (none)
-- (a view) The datasets in this warehouse: each one's schema holds its tables, vocab and as_text().
select
    name,
    traces_path,
    tokenizer,
    tokenizer_fingerprint,
    traces,
    ingested_at
from main.dataset_versions
qualify row_number() over (partition by name order by ingested_at desc) = 1
