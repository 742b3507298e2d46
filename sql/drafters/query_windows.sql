-- out: query_windows
-- grain: trace_id, pos
-- reads: query_positions, selected_traces
-- params: $width BIGINT
-- The last `width` known tokens at each query position (fewer near the start of a trace):
-- what the backoff walk starts from.
select
    q.trace_id,
    q.pos,
    t.tokens[greatest(q.pos - $width, 0) + 1:q.pos] as window
from query_positions as q
join selected_traces as t using (trace_id)
order by q.trace_id, q.pos
