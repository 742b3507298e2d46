-- out: bundle_store
-- grain: trace_id
-- reads: selected_traces
-- params: (none)
-- The token store of a drafter bundle: the train traces' tokens (as the tables were built from
-- them, responses cut), one after another in trace order; store_start is where each begins.
-- n-gram drafts point into it (bundle_ngram.sql).
select
    trace_id,
    coalesce(sum(n_tokens) over (order by trace_id rows between unbounded preceding and 1 preceding), 0)::bigint
        as store_start,
    tokens
from selected_traces
where split = 'train'
order by trace_id
