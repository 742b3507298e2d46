-- out: copy_candidates
-- grain: trace_id, pos
-- reads: query_context_keys, query_positions, token_windows
-- params: $copy_context_lengths INTEGER[], $draft_len BIGINT
-- Prefix copy: the latest earlier place in the same trace (prompt + known response) whose
-- ctx_len tokens equal the last ctx_len known tokens, with the draft_len tokens after it wholly
-- known (match_pos <= pos - draft_len); the longest ctx_len that has one wins.
with occurrences as (
    select
        k.trace_id,
        k.pos,
        k.ctx_len,
        max(k.pos) over (
            partition by k.trace_id, k.ctx_len, k.ctx_hash
            order by k.pos
            range between unbounded preceding and $draft_len preceding
        ) as match_pos
    from query_context_keys as k
    semi join query_positions as q on q.trace_id = k.trace_id
    where list_contains($copy_context_lengths, k.ctx_len)
),
longest as (
    select
        q.trace_id,
        q.pos,
        max(o.ctx_len) as ctx_len,
        arg_max(o.match_pos, o.ctx_len) as match_pos
    from query_positions as q
    join occurrences as o using (trace_id, pos)
    where o.match_pos is not null
    group by q.trace_id, q.pos
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
