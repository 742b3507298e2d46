-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: context_keys, trace_positions
-- params: $ctx_len INTEGER, $top_k BIGINT
-- The global n-gram table: per context, the draft_len-token continuations that followed it in
-- train, counted; the top --max-continuations-per-context kept, ranked like Counter.most_common
-- (highest count, ties to the first seen). (src_trace_id, src_pos) is the first position the
-- continuation was seen at: its tokens are tokens[src_pos .. src_pos + draft_len - 1] there.
-- Built one context length at a time (appended), so each grouping fits in memory.
with counted as (
    select
        ctx_len,
        ctx_hash,
        continuation_hash,
        count(*) as count,
        min(exact_order) as first_seen
    from context_keys
    where for_ngram
        and ctx_len = $ctx_len
        and exact_order is not null
    group by ctx_len, ctx_hash, continuation_hash
),
ranked as (
    select
        *,
        row_number() over (partition by ctx_len, ctx_hash order by count desc, first_seen) as rank
    from counted
)
select
    r.ctx_len,
    r.ctx_hash,
    r.rank,
    r.continuation_hash,
    r.count,
    r.first_seen,
    p.trace_id as src_trace_id,
    p.pos as src_pos
from ranked as r
join trace_positions as p on p.exact_order = r.first_seen
where r.rank <= $top_k
