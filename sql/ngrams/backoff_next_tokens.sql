-- out: backoff_next_tokens
-- grain: ctx_len, ctx_hash, token_id
-- reads: context_keys
-- params: (none)
-- The backoff table: per context, how often each next token followed it in train.
select
    ctx_len,
    ctx_hash,
    token_id,
    count(*) as count,
    min(backoff_order) as first_seen
from context_keys
where for_backoff
    and backoff_order is not null
group by ctx_len, ctx_hash, token_id
