-- out: context_keys
-- grain: trace_id, pos, ctx_len
-- reads: trace_positions, key_lengths
-- params: (none)
-- (a view) The key of the ctx_len tokens before pos, tokens[pos - ctx_len .. pos - 1]: the context
-- a drafter sees when pos tokens are known. Packed as h1 * 2^31 + h2, where under each prime
-- h = (c(pos) - c(pos - ctx_len)) * B^(pos - 1) mod p  (see trace_positions).
select
    k.trace_id,
    k.split,
    k.pos,
    l.ctx_len,
    l.for_ngram,
    l.for_backoff,
    l.for_copy,
    k.token_id,
    k.continuation_hash,
    k.exact_order,
    k.backoff_order,
    (k.c1 - s.c1) % 2147483647 * k.end_pow1 % 2147483647 * 2147483648
        + (k.c2 - s.c2) % 2147483629 * k.end_pow2 % 2147483629 as ctx_hash
from trace_positions as k
cross join key_lengths as l
join trace_positions as s on s.trace_id = k.trace_id and s.pos = k.pos - l.ctx_len
