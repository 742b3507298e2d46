-- out: continuation_keys
-- grain: trace_id, pos
-- reads: prefix_hashes
-- params: $draft_len BIGINT, $pow1 BIGINT, $pow2 BIGINT, $p1 BIGINT, $p2 BIGINT
-- The key of the draft_len tokens that follow pos (tokens[pos .. pos + draft_len - 1]), for
-- train positions with a full continuation.
with bounds as (
    select
        trace_id,
        pos,
        lead(h1, $draft_len - 1) over w as end1,
        lead(h2, $draft_len - 1) over w as end2,
        coalesce(lag(h1, 1) over w, 0) as start1,
        coalesce(lag(h2, 1) over w, 0) as start2
    from prefix_hashes
    where split = 'train'
    window w as (partition by trace_id order by pos)
)
select
    trace_id,
    pos,
    (((end1 - start1 * $pow1 % $p1) % $p1 + $p1) % $p1) * 2147483648
        + ((end2 - start2 * $pow2 % $p2) % $p2 + $p2) % $p2 as continuation_hash
from bounds
where end1 is not null
