-- out: context_keys
-- grain: trace_id, pos, ctx_len
-- reads: prefix_hashes
-- params: $ctx_len BIGINT, $pow1 BIGINT, $pow2 BIGINT, $p1 BIGINT, $p2 BIGINT
-- The key of the ctx_len tokens before pos (tokens[pos - ctx_len .. pos - 1]), i.e. the
-- context a drafter sees when pos tokens are known. From inclusive prefix hashes:
-- key = H(pos - 1) - H(pos - 1 - ctx_len) * B^ctx_len, under both primes, packed as h1 * 2^31 + h2.
with bounds as (
    select
        trace_id,
        split,
        pos,
        lag(h1, 1) over w as end1,
        lag(h2, 1) over w as end2,
        coalesce(lag(h1, $ctx_len + 1) over w, 0) as start1,
        coalesce(lag(h2, $ctx_len + 1) over w, 0) as start2
    from prefix_hashes
    window w as (partition by trace_id order by pos)
)
select
    trace_id,
    split,
    pos,
    $ctx_len::integer as ctx_len,
    (((end1 - start1 * $pow1 % $p1) % $p1 + $p1) % $p1) * 2147483648
        + ((end2 - start2 * $pow2 % $p2) % $p2 + $p2) % $p2 as ctx_hash
from bounds
where pos >= $ctx_len
