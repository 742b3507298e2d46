-- out: train_positions
-- grain: (one row)
-- reads: selected_traces
-- params: $from_trace_id BIGINT
-- How many train positions (tokens of the selected train traces, from $from_trace_id on) the
-- train keys would hold: whether they fit in memory beside DuckDB (TrainKeys.fit_beside).
select
    sum(n_tokens)::bigint as positions
from selected_traces
where split = 'train'
    and trace_id >= $from_trace_id
