-- out: eval_candidates
-- grain: trace_id, pos, family
-- reads: candidates
-- params: (none)
-- Eval candidates in the seed's order (position, then candidate order), for the policy's pick.
select
    trace_id,
    pos,
    completion_pos,
    family_order,
    family,
    source,
    ctx_len,
    count,
    score,
    accepted
from candidates
where split = 'eval'
order by trace_id, pos, family_order
