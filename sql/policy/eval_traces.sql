-- out: eval_traces
-- grain: trace_id
-- reads: selected_traces, the dataset's traces Parquet file ($traces_path)
-- params: $traces_path VARCHAR
-- Eval traces with their tokens and prompt text: what the decode-step walk replays.
select
    t.trace_id,
    t.prompt_len,
    t.n_tokens,
    t.tokens,
    p.prompt
from selected_traces as t
join read_parquet($traces_path) as p using (trace_id)
where t.split = 'eval'
order by t.trace_id
