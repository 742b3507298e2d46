-- out: exact_positions
-- grain: trace_id, pos
-- reads: selected_traces, continuation_keys
-- params: $draft_len BIGINT, $max_positions BIGINT
-- The train positions the seed's ContinuationIndex adds: pos < n_tokens - draft_len in each
-- train trace, counted in train order (split_row, then pos), the first --max-index-positions
-- only (0 = all). seen_order is that count, which breaks ties as Counter.most_common does.
with train_traces as (
    select
        trace_id,
        greatest(n_tokens - $draft_len, 0) as n_indexed,
        coalesce(sum(greatest(n_tokens - $draft_len, 0)) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0) as indexed_before
    from selected_traces
    where split = 'train'
)
select
    c.trace_id,
    c.pos,
    t.indexed_before + c.pos as seen_order,
    c.continuation_hash
from continuation_keys as c
join train_traces as t using (trace_id)
where c.pos < t.n_indexed
    and ($max_positions = 0 or t.indexed_before + c.pos < $max_positions)
