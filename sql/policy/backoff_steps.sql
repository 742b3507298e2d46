-- out: backoff_steps
-- grain: trace_id, pos
-- reads: backoff_candidates, near_ties (registered by evaluate.py)
-- params: (none)
-- The per-step context lengths, counts and totals of backoff drafts whose policy score is within
-- rounding of another candidate's, so Python can recompute the seed's exact score.
select
    b.trace_id,
    b.pos,
    b.step_ctx_lens,
    b.step_counts,
    b.step_totals
from backoff_candidates as b
semi join near_ties as n on n.trace_id = b.trace_id and n.pos = b.pos
order by b.trace_id, b.pos
