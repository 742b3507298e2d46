-- out: index_counters
-- grain: (one row)
-- reads: selected_traces
-- params: $draft_len BIGINT, $max_index_positions BIGINT, $backoff_max_index_positions BIGINT
-- The seed's positions_added counters: train positions its two indexes took, after the caps.
with totals as (
    select
        coalesce(sum(greatest(n_tokens - $draft_len, 0)), 0) as exact_positions,
        coalesce(sum(n_tokens), 0) as backoff_positions
    from selected_traces
    where split = 'train'
)
select
    case when $max_index_positions = 0 then exact_positions
        else least(exact_positions, $max_index_positions) end as exact_positions_added,
    case when $backoff_max_index_positions = 0 then backoff_positions
        else least(backoff_positions, $backoff_max_index_positions) end as backoff_positions_added
from totals
