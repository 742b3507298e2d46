-- out: prefix_hashes
-- grain: trace_id, pos
-- reads: prefix_hashes
-- params: $span BIGINT, $pow1 BIGINT, $pow2 BIGINT, $p1 BIGINT, $p2 BIGINT
-- One doubling step of a prefix scan (Hillis-Steele). Before the step, (h1, h2) at pos hash
-- the window tokens[max(0, pos - span + 1) .. pos]; after it, the window of twice that span.
-- Starting from token_id + 1 and doubling span = 1, 2, 4, ... until it covers the longest
-- trace leaves the hash of tokens[0 .. pos] (inclusive) at every pos.
select
    trace_id,
    split,
    pos,
    token_id,
    (coalesce(lag(h1, $span) over w, 0) * $pow1 + h1) % $p1 as h1,
    (coalesce(lag(h2, $span) over w, 0) * $pow2 + h2) % $p2 as h2
from prefix_hashes
window w as (partition by trace_id order by pos)
