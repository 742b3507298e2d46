-- out: train_traces
-- grain: trace_id
-- reads: selected_traces
-- params: $draft_len BIGINT, $from_trace_id BIGINT, $to_trace_id BIGINT
-- The selected train traces from $from_trace_id on (and before $to_trace_id, where it is not 0:
-- one chunk of a build that does not fit in memory at once), in train order, with their tokens and the
-- index order of their first position (the train positions before them that ContinuationIndex
-- and BackoffIndex add, as in position_keys.sql): what train_keys.py hashes. The orders count
-- every selected train trace before, also those before $from_trace_id.
-- The running sums read only the traces' sizes: a window over the tokens would carry every train
-- trace's list through its sort, for each chunk.
with offsets as (
    select
        trace_id,
        split_row,
        n_tokens,
        coalesce(sum(greatest(n_tokens - $draft_len, 0)) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as exact_before,
        coalesce(sum(n_tokens) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as backoff_before
    from selected_traces
    where split = 'train'
)
select o.trace_id, o.n_tokens, t.tokens, o.exact_before, o.backoff_before
from offsets as o
join selected_traces as t on t.trace_id = o.trace_id
where o.trace_id >= $from_trace_id
    and ($to_trace_id = 0 or o.trace_id < $to_trace_id)
order by o.split_row
