-- out: bundle_ngram
-- grain: ctx_len, ctx_hash
-- reads: ngram_choices, selected_traces
-- params: $rank INTEGER
-- The global n-gram as its sources read it: per context, its $rank-th choice of continuation
-- (ngram_choices.sql; 1: the seed's n-gram and ngram-all; 2: ngram-rank2, --preset default) with
-- its count, and where its tokens start in the bundle's token store (the same train-order offsets
-- as bundle_store.sql).
with store as (
    select
        trace_id,
        coalesce(sum(n_tokens) over (order by trace_id rows between unbounded preceding and 1 preceding), 0)::bigint
            as store_start
    from selected_traces
    where split = 'train'
)
select
    e.ctx_len,
    e.ctx_hash,
    e.count,
    s.store_start + e.src_pos as store_pos
from ngram_choices as e
join store as s on s.trace_id = e.src_trace_id
where e.choice = $rank
order by e.ctx_len, e.ctx_hash
