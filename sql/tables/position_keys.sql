-- out: position_keys
-- grain: trace_id, pos
-- reads: trace_positions
-- params: $ctx_len INTEGER[]
-- (a build intermediate) Every train position with its context key at each n-gram and backoff
-- context length: key_<L> is the key of tokens[pos - L .. pos - 1], as context_keys computes it
-- (null when pos < L). One window pass makes the keys of every length, so the per-length tables
-- (through length_keys) group them without joining the positions again.
select
    trace_id,
    pos,
    token_id,
    (c1 - lag(c1, {ctx_len}) over w) % 2147483647 * end_pow1 % 2147483647 * 2147483648 + (c2 - lag(c2, {ctx_len}) over w) % 2147483629 * end_pow2 % 2147483629 as key_{ctx_len},
    continuation_hash,
    exact_order,
    backoff_order
from trace_positions
where split = 'train'
window w as (partition by trace_id order by pos)
