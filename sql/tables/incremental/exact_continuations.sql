-- out: exact_continuations
-- grain: ctx_len, ctx_hash, rank
-- reads: exact_continuation_counts, exact_continuation_counts_delta
-- params: $top_k BIGINT
-- (DuckDB only: an incremental update) Re-rank the contexts the appended traces touched, from the
-- merged full counts, as sql/tables/exact_continuations.sql ranks them; every other context keeps
-- its rows. Counts only grow and continuations are only added, so a touched context has at least
-- as many ranks as before: each rank's row is replaced or inserted, none is left over.
merge into exact_continuations as e
using (
    with touched as (
        select distinct
            ctx_len,
            ctx_hash
        from exact_continuation_counts_delta
    ),
    ranked as (
        select
            c.ctx_len,
            c.ctx_hash,
            c.continuation_hash,
            c.count,
            c.first_seen,
            c.src_trace_id,
            c.src_pos,
            row_number() over (partition by c.ctx_len, c.ctx_hash order by c.count desc, c.first_seen) as rank
        from exact_continuation_counts as c
        semi join touched as t on t.ctx_len = c.ctx_len and t.ctx_hash = c.ctx_hash
    )
    select
        *
    from ranked
    where rank <= $top_k
) as r
on e.ctx_len = r.ctx_len
    and e.ctx_hash = r.ctx_hash
    and e.rank = r.rank
when matched then update set
    continuation_hash = r.continuation_hash,
    count = r.count,
    first_seen = r.first_seen,
    src_trace_id = r.src_trace_id,
    src_pos = r.src_pos
when not matched then insert by name
