-- out: backoff_probe_hits
-- grain: probe_id
-- reads: backoff_probes (registered by the backoff walk), backoff_top_tokens
-- params: $ctx_len INTEGER
-- One step of the backoff walk at one context length, for tables too large to hold in memory:
-- the pick (next token, count and total) of each probed key that is in the table. The table is
-- written a length at a time, so the length's filter skips the other lengths' row groups.
select
    p.probe_id,
    t.token_id,
    t.count,
    t.total
from backoff_probes as p
join backoff_top_tokens as t on t.ctx_hash = p.ctx_hash
where t.ctx_len = $ctx_len
