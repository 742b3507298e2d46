-- out: length_keys
-- grain: trace_id, pos
-- reads: position_keys
-- params: $ctx_len INTEGER
-- (a view, one context length at a time) The train positions with a context of ctx_len tokens
-- and its key: what the n-gram and backoff tables of that length group.
select
    trace_id,
    pos,
    token_id,
    continuation_hash,
    exact_order,
    backoff_order,
    key_{ctx_len} as ctx_hash
from position_keys
where key_{ctx_len} is not null
    and (exact_order is not null or backoff_order is not null)
