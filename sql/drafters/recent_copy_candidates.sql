-- out: recent_copy_candidates
-- grain: trace_id, pos, source
-- reads: context_occurrences, token_windows
-- params: $enabled BOOLEAN, $draft_len BIGINT
-- Recent copy (not in the seed): for every context length, the latest and the second-latest
-- earlier place in the same trace whose last ctx_len tokens equal the last ctx_len known tokens.
-- The draft repeats what followed that place; where the copy reaches the present it goes on
-- repeating the period (the distance back), which is how a repetition loop continues. Only
-- known tokens (before pos) are ever read: match_pos + (i mod (pos - match_pos)) < pos.
with occurrences as (
    -- (context_occurrences.sql: the query positions whose context occurred earlier)
    select trace_id, pos, ctx_len, latest, second_latest, earlier_occurrences
    from context_occurrences
    where $enabled
),
matches as (
    select trace_id, pos, ctx_len, latest as match_pos, earlier_occurrences, 'recent-copy' as family
    from occurrences
    where latest is not null
    union all
    select trace_id, pos, ctx_len, second_latest, earlier_occurrences, 'recent-copy-2'
    from occurrences
    where second_latest is not null
)
select
    m.trace_id,
    m.pos,
    m.family,
    m.family || ':' || m.ctx_len as source,
    m.ctx_len,
    m.earlier_occurrences as count,
    m.ctx_len * 1.0 as score,
    m.match_pos,
    -- the tokens after the match (token_windows), the period repeated where the copy reaches pos:
    -- i mod the period is below it, so only tokens before pos are read
    list_transform(
        range($draft_len),
        lambda i: w.next_tokens[(i % (m.pos - m.match_pos)) + 1]
    ) as draft
from matches as m
join token_windows as w on w.trace_id = m.trace_id and w.pos = m.match_pos
