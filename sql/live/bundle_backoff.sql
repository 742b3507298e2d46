-- out: bundle_backoff
-- grain: ctx_len, ctx_hash
-- reads: backoff_top_tokens
-- params: $backoff_lengths INTEGER[]
-- The backoff picks the seed's walk can look up (context lengths from --backoff-min-context-len
-- up): per context, the most frequent next token, its count and the context's total.
select
    ctx_len,
    ctx_hash,
    token_id,
    count,
    total
from backoff_top_tokens
where list_contains($backoff_lengths, ctx_len)
order by ctx_len, ctx_hash
