-- out: hash_powers
-- grain: pos
-- reads: (parameters only)
-- params: (none)
-- B^0 = 1 under both primes: the first row of hash_powers.sql's doubling.
select
    0::bigint as pos,
    1::bigint as b1,
    1::bigint as b2,
    1::bigint as binv1,
    1::bigint as binv2
