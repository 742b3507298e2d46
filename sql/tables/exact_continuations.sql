-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: exact_continuation_counts
-- params: $ctx_len INTEGER, $top_k BIGINT
-- The global n-gram table: per context, the top --max-continuations-per-context continuations
-- that followed it in train, ranked like Counter.most_common (highest count, ties to the first
-- seen). (src_trace_id, src_pos) is the first position the continuation was seen at: its tokens
-- are tokens[src_pos .. src_pos + draft_len - 1] there. Built one context length at a time
-- (appended), so each ranking fits in memory.
with ranked as (
    select
        ctx_len,
        ctx_hash,
        continuation_hash,
        count,
        first_seen,
        src_trace_id,
        src_pos,
        row_number() over (partition by ctx_len, ctx_hash order by count desc, first_seen)::bigint as rank
    from exact_continuation_counts
    where ctx_len = $ctx_len
)
select
    ctx_len,
    ctx_hash,
    rank,
    continuation_hash,
    count,
    first_seen,
    src_trace_id,
    src_pos
from ranked
where rank <= $top_k
