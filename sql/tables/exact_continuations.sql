-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: length_keys
-- params: $ctx_len INTEGER, $top_k BIGINT
-- The global n-gram table: per context, the top --max-continuations-per-context continuations
-- that followed it in train, ranked like Counter.most_common (highest count, ties to the first
-- seen, first_seen in train order). (src_trace_id, src_pos) is the first position the
-- continuation was seen at: its tokens are tokens[src_pos .. src_pos + draft_len - 1] there.
-- Counted and ranked in one statement, one context length at a time (appended), so each
-- grouping fits in memory; the full counts are kept apart only with --keep-counts
-- (exact_continuation_counts.sql counts the same way).
with ranked as (
    select
        ctx_hash,
        continuation_hash,
        count(*) as count,
        min(exact_order) as first_seen,
        -- exact_order is unique per position, so this is the first-seen position's (trace id and
        -- pos packed into one value: one aggregate, and one column fewer through the ranking)
        arg_min(trace_id * 4294967296 + pos, exact_order) as src,
        row_number() over (partition by ctx_hash order by count(*) desc, min(exact_order))::bigint as rank
    from length_keys
    where exact_order is not null
    group by ctx_hash, continuation_hash
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
