-- out: dropped_traces
-- grain: split
-- reads: the dataset's traces Parquet file ($traces_path)
-- params: $traces_path VARCHAR, $train_limit BIGINT, $calibration_limit BIGINT, $eval_limit BIGINT
-- Rows skipped within the limits because their completion has no tokens (as the seed skips them):
-- reported in results.json, never silently.
select
    split,
    count(*) as dropped
from read_parquet($traces_path)
where array_length(completion_tokens) = 0
    and split_row < case split
        when 'train' then coalesce(nullif($train_limit, 0), 9223372036854775807)
        when 'calibration' then coalesce(nullif($calibration_limit, 0), 9223372036854775807)
        when 'eval' then coalesce(nullif($eval_limit, 0), 9223372036854775807)
    end
group by split
order by split
