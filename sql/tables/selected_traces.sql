-- out: selected_traces
-- grain: trace_id
-- reads: the dataset's traces Parquet file ($traces_path)
-- params: $traces_path VARCHAR, $train_limit BIGINT, $calibration_limit BIGINT, $eval_limit BIGINT, $max_completion_tokens BIGINT, $from_trace_id BIGINT
-- The seed's build_examples: the first --*-limit rows of each split, the completion cut to
-- --max-completion-tokens, and rows whose completion has no tokens dropped. A full build reads
-- every trace ($from_trace_id = 0); an incremental update only the appended ones.
with limited as (
    select
        trace_id,
        split,
        split_row,
        prompt_tokens,
        case
            when $max_completion_tokens > 0 then completion_tokens[1:$max_completion_tokens]
            else completion_tokens
        end as completion_tokens
    from read_parquet($traces_path)
    where trace_id >= $from_trace_id
        and split_row < case split
            when 'train' then coalesce(nullif($train_limit, 0), 9223372036854775807)
            when 'calibration' then coalesce(nullif($calibration_limit, 0), 9223372036854775807)
            when 'eval' then coalesce(nullif($eval_limit, 0), 9223372036854775807)
        end
)
select
    trace_id,
    split,
    split_row,
    array_length(prompt_tokens)::bigint as prompt_len,
    (array_length(prompt_tokens) + array_length(completion_tokens))::bigint as n_tokens,
    list_concat(prompt_tokens, completion_tokens) as tokens
from limited
where array_length(completion_tokens) > 0
