-- out: query_context_keys
-- grain: trace_id, pos, ctx_len
-- reads: context_keys
-- params: (none)
-- Context keys of calibration and eval traces, at every position: what the copy and n-gram
-- sources look up.
select
    trace_id,
    pos,
    ctx_len,
    ctx_hash
from context_keys
where split <> 'train'
    and (for_copy or for_ngram)
