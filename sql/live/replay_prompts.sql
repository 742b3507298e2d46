-- out: replay_prompts
-- grain: trace_id
-- reads: selected_traces, the dataset's traces Parquet file ($traces_path)
-- params: $traces_path VARCHAR
-- The eval traces' prompt text, in replay_traces' order: a replay starts each session with it, as
-- the run's prompt autocomplete read it (--preset seed; the default preset reads the tokens).
select
    t.trace_id,
    p.prompt
from selected_traces as t
join read_parquet($traces_path) as p using (trace_id)
where t.split = 'eval'
order by t.trace_id
