-- out: ngram_choices
-- grain: ctx_len, ctx_hash, choice
-- reads: exact_continuations, path_choices (registered by build_ngram_choices)
-- params: (none)
-- The two continuations the global n-gram drafts per context: choice 1 (the seed's n-gram and
-- ngram-all) and choice 2 (ngram-rank2). By default they are the two most frequent (rank 1 and 2,
-- Counter.most_common's: --preset seed). A context in path_choices (--preset default: the
-- continuation on its most supported path, drafters/ngram_paths.py) has that one as choice 1,
-- and the others follow in count order.
with choices as (
    select
        e.ctx_len,
        e.ctx_hash,
        case
            when p.rank is null or e.rank > p.rank then e.rank
            when e.rank = p.rank then 1
            else e.rank + 1
        end as choice,
        e.rank,
        e.count,
        e.src_trace_id,
        e.src_pos
    from exact_continuations as e
    left join path_choices as p on p.ctx_len = e.ctx_len and p.ctx_hash = e.ctx_hash
)
select
    ctx_len,
    ctx_hash,
    choice,
    rank,
    count,
    src_trace_id,
    src_pos
from choices
where choice <= 2
