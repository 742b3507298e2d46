-- out: candidates
-- grain: trace_id, pos, source
-- reads: token_windows, copy_candidates, prompt_candidates, backoff_candidates, ngram_candidates,
--        recent_copy_candidates, ngram_all_candidates, online_candidates, arithmetic_candidates, source_families
-- params: (none)
-- Every source's draft at every query position, with how many of its leading tokens match the
-- trace (accepted). family_order is the family's place in specdraft/families.py: the seed's
-- candidate order, which breaks policy ties, then the sources beyond the seed.
with drafts as (
    select trace_id, pos, family, source, ctx_len, count, score, draft, match_pos from copy_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from prompt_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from backoff_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from ngram_candidates
    union all
    -- beyond the seed (empty under --preset seed)
    select trace_id, pos, family, source, ctx_len, count, score, draft, match_pos from recent_copy_candidates
    union all
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from ngram_all_candidates
    union all
    -- the online scenario only (--online)
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from online_candidates
    union all
    -- --preset default (empty under --preset seed)
    select trace_id, pos, family, source, ctx_len, count, score, draft, null as match_pos from arithmetic_candidates
),
-- the trace's next draft_len tokens at each query position, and the last three known tokens
-- (token_windows: one row a position, not the trace's token list in every row of a join)
actuals as (
    -- every position of the query traces: the drafts' join keeps those queried
    select
        trace_id,
        pos,
        split,
        completion_pos,
        next_tokens as actual,
        last_token,
        before_last_token,
        two_before_last_token
    from token_windows
),
aligned as (
    select
        d.*,
        f.family_order,
        a.split,
        a.completion_pos,
        a.actual,
        a.last_token,
        a.before_last_token,
        a.two_before_last_token
    from drafts as d
    join source_families as f using (family)
    join actuals as a using (trace_id, pos)
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
    match_pos,
    last_token,
    before_last_token,
    two_before_last_token,
    draft,
    coalesce(
        list_position(
            list_transform(range(1, least(len(draft), len(actual)) + 1), lambda i: draft[i] = actual[i]),
            false
        ) - 1,
        least(len(draft), len(actual))
    ) as accepted
from aligned
