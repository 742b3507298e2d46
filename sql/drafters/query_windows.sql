-- out: query_windows
-- grain: trace_id
-- reads: query_positions, selected_traces
-- params: (none)
-- Each calibration and eval trace's tokens with the positions queried in it, in order: what the
-- backoff walk starts from (the tokens before each position).
with positions as (
    select
        trace_id,
        list(pos order by pos) as positions
    from query_positions
    group by trace_id
)
select
    t.trace_id,
    t.tokens,
    p.positions
from selected_traces as t
join positions as p using (trace_id)
order by t.trace_id
