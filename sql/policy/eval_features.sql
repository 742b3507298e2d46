-- out: eval_features
-- grain: trace_id, pos, source
-- reads: candidate_features
-- params: (none)
-- Eval drafts with their features, in the order the confidence policy breaks ties in.
select
    *
from candidate_features
where split = 'eval'
order by trace_id, pos, family_order, ctx_len
