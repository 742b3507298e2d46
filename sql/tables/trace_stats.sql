-- out: trace_stats
-- grain: split
-- reads: selected_traces
-- params: (none)
-- Traces and tokens per split after limits, truncation and dropping empty completions.
select
    split,
    count(*) as traces,
    sum(n_tokens)::bigint as tokens,
    sum(n_tokens - prompt_len)::bigint as response_tokens,
    max(n_tokens) as longest_trace
from selected_traces
group by split
order by split
