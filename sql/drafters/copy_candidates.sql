-- out: copy_candidates
-- grain: trace_id, pos
-- reads: context_occurrences, token_windows
-- params: $copy_context_lengths INTEGER[]
-- Prefix copy: the latest earlier place in the same trace (prompt + known response) whose
-- ctx_len tokens equal the last ctx_len known tokens, with the draft_len tokens after it wholly
-- known (match_pos <= pos - draft_len); the longest ctx_len that has one wins.
with longest as (
    -- the longest copy length with a match, and its match (context_occurrences.sql)
    select
        trace_id,
        pos,
        max(ctx_len) as ctx_len,
        arg_max(copy_match_pos, ctx_len) as match_pos
    from context_occurrences
    where copy_match_pos is not null and list_contains($copy_context_lengths, ctx_len)
    group by trace_id, pos
)
select
    l.trace_id,
    l.pos,
    'copy' as family,
    'copy:' || l.ctx_len as source,
    l.ctx_len,
    null::bigint as count,
    l.ctx_len * 9.0 + 0.5 as score,
    l.match_pos,
    -- the draft_len tokens after the match (token_windows: not the trace's token list per row)
    w.next_tokens as draft
from longest as l
join token_windows as w on w.trace_id = l.trace_id and w.pos = l.match_pos
