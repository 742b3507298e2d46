-- out: ranked_contexts
-- grain: (one row)
-- reads: exact_continuation_scope
-- params: (none)
-- What exact_continuation_scope says exact_continuations ranks ('queried' or 'all'), and with what
-- (every column: a table written before it recorded the settings has `contexts` alone).
select
    *
from exact_continuation_scope
