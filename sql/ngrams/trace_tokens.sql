-- out: trace_tokens
-- grain: trace_id, pos
-- reads: selected_traces
-- params: (none)
-- One row per token of prompt + completion; pos counts from 0 at the first prompt token.
select
    trace_id,
    split,
    unnest(generate_series(0, n_tokens - 1)) as pos,
    unnest(tokens) as token_id
from selected_traces
