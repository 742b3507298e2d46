-- out: backoff_next_tokens
-- grain: ctx_len, ctx_hash, token_id
-- reads: length_next_tokens
-- params: $ctx_len INTEGER
-- (built with --keep-counts only) The backoff counts in full: per context, how often each next
-- token followed it in train, and when it was first seen; what an incremental update merges
-- into. Built one context length at a time (appended).
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    token_id,
    count,
    first_seen
from length_next_tokens
