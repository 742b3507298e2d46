-- out: hash_power_rows
-- grain: pos
-- reads: hash_powers
-- params: (none)
-- B^pos and B^-pos under both primes, in position order: the powers train_keys.py reads, the
-- same rows position_keys.sql joins.
select pos, b1, b2, binv1, binv2
from hash_powers
order by pos
