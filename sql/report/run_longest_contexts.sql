-- out: run_longest_contexts
-- grain: ctx_tokens, source
-- reads: run_hitting_contexts, vocab (through as_text)
-- params: $top BIGINT
-- One run's longest contexts that chosen drafts hit after (at least one token accepted), rendered
-- as text, for its report: the multi-token matches behind the hits, beside the most-hit contexts
-- (run_top_contexts, where one-token contexts such as "=" lead).
with longest as (
    select
        ctx_tokens,
        ctx_len,
        source,
        hits,
        chosen
    from run_hitting_contexts
    where hits > 0
        and ctx_len > 1
    order by ctx_len desc, hits desc, chosen desc, source, ctx_tokens
    limit $top
)
select
    as_text(ctx_tokens) as context,
    ctx_len,
    source,
    hits,
    chosen
from longest
order by ctx_len desc, hits desc, chosen desc, source, context
