-- out: lookup_backoff
-- grain: ctx_len
-- reads: lookup_probes (registered by specdraft lookup), backoff_top_tokens
-- params: (none)
-- The backoff table's pick for each probed context.
select
    b.ctx_len,
    b.token_id,
    b.count,
    b.total
from lookup_probes as p
join backoff_top_tokens as b on b.ctx_len = p.ctx_len and b.ctx_hash = p.ctx_hash
order by b.ctx_len desc
