-- out: ranked_contexts
-- grain: (one row)
-- reads: exact_continuation_scope
-- params: (none)
-- What exact_continuation_scope says exact_continuations ranks ('queried' or 'all'), and with what.
select
    contexts,
    draft_len,
    max_index_positions,
    max_continuations_per_context
from exact_continuation_scope
