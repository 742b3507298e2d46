-- out: backoff_next_tokens
-- grain: ctx_len, ctx_hash, token_id
-- reads: backoff_next_tokens, backoff_next_tokens_delta
-- params: (none)
-- (DuckDB only: an incremental update) Add the appended traces' next-token counts (the delta,
-- made by sql/tables/backoff_next_tokens.sql over their positions alone) to the backoff table.
merge into backoff_next_tokens as b
using backoff_next_tokens_delta as d
on b.ctx_len = d.ctx_len
    and b.ctx_hash = d.ctx_hash
    and b.token_id = d.token_id
when matched then update set
    count = b.count + d.count,
    first_seen = least(b.first_seen, d.first_seen)
when not matched then insert by name
