-- out: eval_features
-- grain: trace_id, pos, source
-- reads: candidate_features
-- params: (none)
-- Eval drafts with their features, in the order the confidence policy breaks ties in.
-- (Not the split, the family order or the seed's score, which nothing reads from here: the evaluate
-- stage holds every eval draft's row.)
select
    * exclude (split, family_order, score)
from candidate_features
where split = 'eval'
order by trace_id, pos, family_order, ctx_len
