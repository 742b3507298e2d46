-- out: train_tokens
-- grain: trace_id
-- reads: selected_traces
-- params: (none)
-- The train traces' tokens (responses cut as the tables were built from them), in trace order:
-- where drafters/ngram_paths.py reads the n-gram's continuations from.
select
    trace_id,
    tokens
from selected_traces
where split = 'train'
order by trace_id
