-- out: backoff_next_tokens
-- grain: ctx_len, ctx_hash, token_id
-- reads: context_keys
-- params: $ctx_len INTEGER
-- The backoff table: per context, how often each next token followed it in train. Built one
-- context length at a time (appended), so each grouping fits in memory.
select
    ctx_len,
    ctx_hash,
    token_id,
    count(*) as count,
    min(backoff_order) as first_seen
from context_keys
where for_backoff
    and ctx_len = $ctx_len
    and backoff_order is not null
group by ctx_len, ctx_hash, token_id
