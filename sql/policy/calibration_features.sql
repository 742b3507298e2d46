-- out: calibration_features
-- grain: trace_id, pos, source
-- reads: candidate_features
-- params: (none)
-- The confidence model's training rows: calibration drafts with their features and accepted length.
select
    *
from candidate_features
where split = 'calibration'
order by trace_id, pos, family_order, ctx_len
