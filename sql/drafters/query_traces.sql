-- out: query_traces
-- grain: trace_id
-- reads: selected_traces, query_positions, the dataset's traces Parquet file ($traces_path)
-- params: $traces_path VARCHAR
-- Calibration and eval traces with their prompt text and the response positions queried in
-- each: what prompt autocomplete walks over.
with positions as (
    select
        trace_id,
        list(completion_pos order by completion_pos) as completion_positions
    from query_positions
    group by trace_id
)
select
    t.trace_id,
    t.split,
    t.prompt_len,
    t.tokens,
    p.prompt,
    q.completion_positions
from selected_traces as t
join positions as q using (trace_id)
join read_parquet($traces_path) as p using (trace_id)
order by t.trace_id
