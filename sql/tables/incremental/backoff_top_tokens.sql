-- out: backoff_top_tokens
-- grain: ctx_len, ctx_hash
-- reads: backoff_next_tokens, backoff_next_tokens_delta
-- params: (none)
-- (DuckDB only: an incremental update) The backoff pick of each context the appended traces
-- touched, recomputed from the merged counts as sql/tables/backoff_top_tokens.sql computes it.
merge into backoff_top_tokens as t
using (
    with touched as (
        select distinct
            ctx_len,
            ctx_hash
        from backoff_next_tokens_delta
    )
    select
        b.ctx_len,
        b.ctx_hash,
        -- highest count, then first seen (seen_order < 2^32)
        arg_max(b.token_id, b.count * 4294967296 - b.first_seen) as token_id,
        max(b.count) as count,
        sum(b.count)::bigint as total
    from backoff_next_tokens as b
    semi join touched as s on s.ctx_len = b.ctx_len and s.ctx_hash = b.ctx_hash
    group by b.ctx_len, b.ctx_hash
) as r
on t.ctx_len = r.ctx_len
    and t.ctx_hash = r.ctx_hash
when matched then update set
    token_id = r.token_id,
    count = r.count,
    total = r.total
when not matched then insert by name
