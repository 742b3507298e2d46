-- out: replay_traces
-- grain: trace_id
-- reads: selected_traces
-- params: (none)
-- The eval traces a replay walks through the live drafter: prompt length and tokens (the
-- response cut as the run's tables were built).
select
    trace_id,
    prompt_len,
    tokens
from selected_traces
where split = 'eval'
order by trace_id
