-- out: exact_continuation_counts
-- grain: ctx_len, ctx_hash, continuation_hash
-- reads: length_continuations
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
    count,
    first_seen,
    src // 4294967296 as src_trace_id,
    src % 4294967296 as src_pos
from length_continuations
