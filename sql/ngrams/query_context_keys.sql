-- out: query_context_keys
-- grain: trace_id, pos, ctx_len
-- reads: context_keys
-- params: (none)
-- Context keys of calibration and eval traces, kept for the candidates stage and for analysts.
select
    trace_id,
    pos,
    ctx_len,
    ctx_hash
from context_keys
where split <> 'train'
