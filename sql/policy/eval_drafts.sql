-- out: eval_drafts
-- grain: trace_id, pos, source
-- reads: candidates
-- params: $families VARCHAR[]
-- The tokens of the eval drafts of the families the policy chooses from, in eval_features' order
-- (position, then family order and context length, unique within a position): what the token
-- trees are built from.
select
    trace_id,
    pos,
    draft
from candidates
where split = 'eval'
    and list_contains($families, family)
order by trace_id, pos, family_order, ctx_len
