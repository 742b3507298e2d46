-- out: backoff_next_tokens
-- grain: ctx_len, ctx_hash, token_id
-- reads: backoff_positions, context_keys
-- params: $backoff_context_lengths INTEGER[]
-- The backoff table: per context, how often each next token followed it in train.
select
    k.ctx_len,
    k.ctx_hash,
    p.token_id,
    count(*) as count,
    min(p.seen_order) as first_seen
from backoff_positions as p
join context_keys as k using (trace_id, pos)
where list_contains($backoff_context_lengths, k.ctx_len)
group by k.ctx_len, k.ctx_hash, p.token_id
