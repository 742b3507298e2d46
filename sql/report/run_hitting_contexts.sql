-- out: run_hitting_contexts
-- grain: source, ctx_tokens
-- reads: top_hitting_contexts
-- params: $run_id VARCHAR
-- One run's rows of the top_hitting_contexts view, grouped once for its report's two context
-- tables (run_top_contexts, run_longest_contexts): the view groups every eval position by its
-- sliced context, 0.15 s a query on the development set.
select
    source,
    ctx_len,
    ctx_tokens,
    chosen,
    hits,
    avg_accepted
from top_hitting_contexts
where run_id = $run_id
