-- out: eval_lengths
-- grain: trace_id
-- reads: selected_traces
-- params: (none)
-- Response length of each eval trace, in trace order: the every-position grid.
select
    trace_id,
    prompt_len,
    n_tokens - prompt_len as n_response
from selected_traces
where split = 'eval'
order by trace_id
