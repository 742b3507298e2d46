-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: length_continuations
-- params: $ctx_len INTEGER, $top_k BIGINT
-- The global n-gram table: per context, the top --max-continuations-per-context continuations
-- that followed it in train, ranked like Counter.most_common (highest count, ties to the first
-- seen, first_seen in train order). (src_trace_id, src_pos) is the first position the
-- continuation was seen at: its tokens are tokens[src_pos .. src_pos + draft_len - 1] there.
-- Ranked one context length at a time (appended), so each grouping fits in memory.
-- The ranking is a top-k aggregate per context (max_by with k: the keys are distinct within a
-- context, so the order is exact), not a window that sorts every continuation of a context: the
-- short contexts have many. On all 25,676 train rows the twelve lengths took 8.5 s instead of
-- 10.5 s (lengths 1 to 4: 5.8 s instead of 8.0 s; the longer ones 2.7 s instead of 2.5 s).
-- The key (count, then first seen, in one BIGINT) and each column are top-k aggregates of their
-- own, in the same order: a struct of them, as one aggregate, took length 2 of the development set
-- (1.19M continuations, 64 kept a context) 0.25-0.29 s against 0.17-0.20 s.
with top as (
    select
        ctx_hash,
        -- the top_k, highest count first, then first seen (first_seen < 2^32); the keys as a
        -- max_by of themselves, which Spark's build writes as its top-k (tables/spark.py)
        max_by(count * 4294967296 - first_seen, count * 4294967296 - first_seen, $top_k) as keys,
        max_by(continuation_hash, count * 4294967296 - first_seen, $top_k) as continuation_hashes,
        max_by(src, count * 4294967296 - first_seen, $top_k) as srcs
    from length_continuations
    group by ctx_hash
),
ranked as (
    select
        ctx_hash,
        unnest(generate_series(1, array_length(keys))) as rank,
        unnest(keys) as key,
        unnest(continuation_hashes) as continuation_hash,
        unnest(srcs) as src
    from top
),
counted as (
    -- the key's count and first seen again: key = count * 2^32 - first_seen, 0 <= first_seen < 2^32
    select
        *,
        (key + 4294967295) // 4294967296 as count
    from ranked
)
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    rank::bigint as rank,
    continuation_hash,
    count,
    count * 4294967296 - key as first_seen,
    src // 4294967296 as src_trace_id,
    src % 4294967296 as src_pos
from counted
