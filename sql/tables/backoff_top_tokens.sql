-- out: backoff_top_tokens
-- grain: ctx_len, ctx_hash
-- reads: length_keys
-- params: $ctx_len INTEGER
-- The backoff drafter's pick per context: the most frequent next token (ties to the first
-- seen, as Counter.most_common), its count, and the context's total count. Counted (as
-- backoff_next_tokens.sql counts) and picked in one statement, one context length at a time
-- (appended).
with next_tokens as (
    select
        ctx_hash,
        token_id,
        count(*) as count,
        min(backoff_order) as first_seen
    from length_keys
    where backoff_order is not null
    group by ctx_hash, token_id
)
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    -- highest count, then first seen (seen_order < 2^32)
    arg_max(token_id, count * 4294967296 - first_seen) as token_id,
    max(count) as count,
    sum(count)::bigint as total
from next_tokens
group by ctx_hash
