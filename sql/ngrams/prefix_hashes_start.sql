-- out: prefix_hashes
-- grain: trace_id, pos
-- reads: trace_tokens
-- params: (none)
-- The start of the prefix scan in prefix_hashes.sql: each token hashes the window of itself.
select
    trace_id,
    split,
    pos,
    token_id,
    token_id::bigint + 1 as h1,
    token_id::bigint + 1 as h2
from trace_tokens
