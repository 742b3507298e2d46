-- out: train_trace_sizes
-- grain: trace_id
-- reads: selected_traces
-- params: $from_trace_id BIGINT
-- The selected train traces from $from_trace_id on, in train order, and their token counts: where a
-- build that does not fit in memory at once cuts its chunks (train_keys.chunk_bounds).
select
    trace_id,
    n_tokens
from selected_traces
where split = 'train'
    and trace_id >= $from_trace_id
order by split_row
