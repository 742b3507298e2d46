-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: length_continuations
-- params: $ctx_len INTEGER, $top_k BIGINT
-- The global n-gram table: per context, the top --max-continuations-per-context continuations
-- that followed it in train, ranked like Counter.most_common (highest count, ties to the first
-- seen, first_seen in train order). (src_trace_id, src_pos) is the first position the
-- continuation was seen at: its tokens are tokens[src_pos .. src_pos + draft_len - 1] there.
-- Ranked one context length at a time (appended), so each grouping fits in memory.
with ranked as (
    select
        *,
        row_number() over (partition by ctx_hash order by count desc, first_seen)::bigint as rank
    from length_continuations
)
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    rank,
    continuation_hash,
    count,
    first_seen,
    src // 4294967296 as src_trace_id,
    src % 4294967296 as src_pos
from ranked
where rank <= $top_k
