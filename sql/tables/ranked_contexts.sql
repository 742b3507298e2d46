-- out: ranked_contexts
-- grain: (one row)
-- reads: exact_continuation_scope
-- params: (none)
-- What exact_continuation_scope says exact_continuations ranks: 'queried' or 'all'.
select
    contexts
from exact_continuation_scope
