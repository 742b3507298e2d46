-- out: length_next_tokens
-- grain: ctx_hash, token_id
-- reads: length_keys
-- params: (none)
-- (a view, one context length at a time) How often each next token followed each context of the
-- length in train, and when it was first seen: what backoff_top_tokens picks from, and with
-- --keep-counts what backoff_next_tokens keeps.
select
    ctx_hash,
    token_id,
    count(*) as count,
    min(backoff_order) as first_seen
from length_keys
where backoff_order is not null
group by ctx_hash, token_id
