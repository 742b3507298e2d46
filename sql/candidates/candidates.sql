-- out: candidates
-- grain: trace_id, pos, family
-- reads: query_positions, selected_traces, copy_candidates, prompt_candidates, backoff_candidates, ngram_candidates
-- params: $draft_len BIGINT
-- Every source's draft at every query position, with how many of its leading tokens match the
-- trace (accepted). family_order is the seed's candidate order, which breaks policy ties.
with drafts as (
    select trace_id, pos, family, source, ctx_len, count, score, draft, 0 as family_order
    from copy_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, 1 as family_order
    from prompt_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, 2 as family_order
    from backoff_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, 3 as family_order
    from ngram_candidates
),
aligned as (
    select
        d.*,
        q.split,
        q.completion_pos,
        t.tokens[d.pos + 1:d.pos + $draft_len] as actual
    from drafts as d
    join query_positions as q using (trace_id, pos)
    join selected_traces as t using (trace_id)
)
select
    split,
    trace_id,
    pos,
    completion_pos,
    family_order,
    family,
    source,
    ctx_len,
    count,
    score,
    draft,
    coalesce(
        list_position(
            list_transform(range(1, least(len(draft), len(actual)) + 1), lambda i: draft[i] = actual[i]),
            false
        ) - 1,
        least(len(draft), len(actual))
    ) as accepted
from aligned
