-- out: dataset_tokenizer
-- grain: (one row)
-- reads: datasets
-- params: $name VARCHAR
-- The tokenizer a dataset was tokenized with.
select
    tokenizer
from main.datasets
where name = $name
