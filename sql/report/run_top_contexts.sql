-- out: run_top_contexts
-- grain: ctx_tokens, source
-- reads: run_hitting_contexts, vocab (through as_text)
-- params: $top BIGINT
-- One run's most-hit contexts, rendered as text, for its report.
with top_contexts as (
    select
        ctx_tokens,
        source,
        hits,
        chosen
    from run_hitting_contexts
    order by hits desc, chosen desc, source, ctx_tokens
    limit $top
)
select
    as_text(ctx_tokens) as context,
    source,
    hits,
    chosen
from top_contexts
order by hits desc, chosen desc, source, context
