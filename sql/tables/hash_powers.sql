-- out: hash_powers
-- grain: pos
-- reads: hash_powers
-- params: $span BIGINT, $pow1 BIGINT, $pow2 BIGINT, $inv1 BIGINT, $inv2 BIGINT, $p1 BIGINT, $p2 BIGINT
-- Doubling: with B^pos and B^-pos known for pos < span, the rows for span <= pos < 2 * span are
-- B^(pos - span) * B^span (and likewise for the inverse). Appended once per doubling, up to the
-- longest trace.
select
    pos + $span as pos,
    b1 * $pow1 % $p1 as b1,
    b2 * $pow2 % $p2 as b2,
    binv1 * $inv1 % $p1 as binv1,
    binv2 * $inv2 % $p2 as binv2
from hash_powers
where pos < $span
