-- out: backoff_probe_hits
-- grain: probe_id
-- reads: backoff_probes (registered by the backoff walk), backoff_top_tokens
-- params: (none)
-- One step of the backoff walk: of the context keys probed for each walk, the longest context
-- length found in the backoff table, with its next token, count and total.
select
    p.probe_id,
    max(p.ctx_len) as ctx_len,
    arg_max(t.token_id, p.ctx_len) as token_id,
    arg_max(t.count, p.ctx_len) as count,
    arg_max(t.total, p.ctx_len) as total
from backoff_probes as p
join backoff_top_tokens as t using (ctx_len, ctx_hash)
group by p.probe_id
