-- out: backoff_length_picks
-- grain: ctx_hash
-- reads: backoff_top_tokens
-- params: $ctx_len INTEGER
-- The backoff picks of one context length: what the backoff walk searches (sorted by context key
-- in numpy, hashing.key_order, then numpy's searchsorted), one length at a time.
select
    ctx_hash,
    token_id,
    count,
    total
from backoff_top_tokens
where ctx_len = $ctx_len
