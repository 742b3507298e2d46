-- out: exact_continuation_counts
-- grain: ctx_len, ctx_hash, continuation_hash
-- reads: exact_continuation_counts, exact_continuation_counts_delta
-- params: (none)
-- (DuckDB only: an incremental update) Add the appended traces' counts (the delta, made by
-- sql/tables/exact_continuation_counts.sql over their positions alone) to the full counts: a
-- continuation seen before keeps its count plus the new one and the earlier first sighting; a new
-- one is inserted.
merge into exact_continuation_counts as c
using exact_continuation_counts_delta as d
on c.ctx_len = d.ctx_len
    and c.ctx_hash = d.ctx_hash
    and c.continuation_hash = d.continuation_hash
when matched then update set
    count = c.count + d.count,
    first_seen = least(c.first_seen, d.first_seen),
    src_trace_id = case when d.first_seen < c.first_seen then d.src_trace_id else c.src_trace_id end,
    src_pos = case when d.first_seen < c.first_seen then d.src_pos else c.src_pos end
when not matched then insert by name
