-- out: calibration_features
-- grain: trace_id, pos, source
-- reads: candidate_features
-- params: (none)
-- The confidence model's training rows: calibration drafts with their features and accepted length.
-- (Not the split, the family order or the seed's score, which nothing reads from here: the evaluate
-- stage holds every eval draft's row.)
select
    * exclude (split, family_order, score)
from candidate_features
where split = 'calibration'
order by trace_id, pos, family_order, ctx_len
