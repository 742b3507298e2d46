-- out: train_traces
-- grain: trace_id
-- reads: selected_traces
-- params: $draft_len BIGINT, $from_trace_id BIGINT
-- The selected train traces from $from_trace_id on, in train order, with their tokens and the
-- index order of their first position (the train positions before them that ContinuationIndex
-- and BackoffIndex add, as in position_keys.sql): what train_keys.py hashes. The orders count
-- every selected train trace before, also those before $from_trace_id.
with ordered as (
    select
        trace_id,
        split_row,
        n_tokens,
        tokens,
        coalesce(sum(greatest(n_tokens - $draft_len, 0)) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as exact_before,
        coalesce(sum(n_tokens) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as backoff_before
    from selected_traces
    where split = 'train'
)
select trace_id, n_tokens, tokens, exact_before, backoff_before
from ordered
where trace_id >= $from_trace_id
order by split_row
