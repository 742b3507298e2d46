-- out: exact_continuation_counts
-- grain: ctx_len, ctx_hash, continuation_hash
-- reads: length_keys
-- params: $ctx_len INTEGER
-- (built with --keep-counts only) The global n-gram counts in full: per context, every
-- draft_len-token continuation that followed it in train, how often, and where it was first seen
-- (first_seen in train order; its tokens are tokens[src_pos .. src_pos + draft_len - 1] of trace
-- src_trace_id). exact_continuations keeps the top ones; the full counts let an incremental
-- update add new traces' counts exactly. Built one context length at a time (appended).
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    continuation_hash,
    count(*) as count,
    min(exact_order) as first_seen,
    -- exact_order is unique per position, so this is the first-seen position's (trace id and
    -- pos packed into one value, one aggregate instead of two)
    arg_min(trace_id * 4294967296 + pos, exact_order) // 4294967296 as src_trace_id,
    arg_min(trace_id * 4294967296 + pos, exact_order) % 4294967296 as src_pos
from length_keys
where exact_order is not null
group by ctx_hash, continuation_hash
