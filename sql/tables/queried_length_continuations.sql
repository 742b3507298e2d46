-- out: queried_length_continuations
-- grain: ctx_hash, continuation_hash
-- reads: length_keys, length_contexts
-- params: (none)
-- (a view, one context length at a time, made under the name length_continuations) What
-- length_continuations.sql counts, for the contexts in length_contexts only. A context's ranking
-- depends on its own continuations alone, so exact_continuations' rows for these contexts are
-- those of a build over every context; the train positions of other contexts are dropped before
-- they are grouped (at length 8 on the development set, 120,255 of 2.2M positions are kept).
select
    ctx_hash,
    continuation_hash,
    count(*) as count,
    min(exact_order) as first_seen,
    min(trace_id * 4294967296 + pos) as src
from length_keys
where exact_order is not null
    and ctx_hash in (select ctx_hash from length_contexts)
group by ctx_hash, continuation_hash
