-- out: backoff_top_tokens
-- grain: ctx_len, ctx_hash
-- reads: length_next_tokens
-- params: $ctx_len INTEGER
-- The backoff drafter's pick per context: the most frequent next token (ties to the first
-- seen, as Counter.most_common), its count, and the context's total count. Built one context
-- length at a time (appended).
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    -- highest count, then first seen (seen_order < 2^32)
    arg_max(token_id, count * 4294967296 - first_seen) as token_id,
    max(count) as count,
    sum(count)::bigint as total
from length_next_tokens
group by ctx_hash
