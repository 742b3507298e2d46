-- out: backoff_positions
-- grain: trace_id, pos
-- reads: selected_traces, trace_tokens
-- params: $max_positions BIGINT
-- The train positions the seed's BackoffIndex adds: every token of every train trace, counted
-- in train order, the first --backoff-max-index-positions only (0 = all).
with train_traces as (
    select
        trace_id,
        coalesce(sum(n_tokens) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0) as indexed_before
    from selected_traces
    where split = 'train'
)
select
    k.trace_id,
    k.pos,
    t.indexed_before + k.pos as seen_order,
    k.token_id
from trace_tokens as k
join train_traces as t using (trace_id)
where $max_positions = 0 or t.indexed_before + k.pos < $max_positions
