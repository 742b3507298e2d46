-- out: online_candidates
-- grain: trace_id, pos, source
-- reads: query_context_keys, query_positions, selected_traces
-- params: $enabled BOOLEAN, $draft_len BIGINT
-- The online scenario (--online): traces of a split are served in order, and each is added to
-- the store once it has been scored, as a serving system's cross-request cache would see them.
-- For every context length, the latest place in an earlier trace of the same split with the same
-- context; the draft is what followed it there (that trace is complete, so all of it is known).
with keyed as (
    select
        k.trace_id,
        k.pos,
        k.ctx_len,
        t.split,
        max(k.trace_id * 4294967296 + k.pos) over (
            partition by t.split, k.ctx_len, k.ctx_hash
            order by k.trace_id
            range between unbounded preceding and 1 preceding
        ) as earlier
    from query_context_keys as k
    join selected_traces as t using (trace_id)
    where $enabled
)
select
    k.trace_id,
    k.pos,
    'online' as family,
    'online:' || k.ctx_len as source,
    k.ctx_len,
    null::bigint as count,
    k.ctx_len * 1.0 as score,
    k.earlier % 4294967296 as match_pos,
    s.tokens[k.earlier % 4294967296 + 1:k.earlier % 4294967296 + $draft_len] as draft
from keyed as k
semi join query_positions as q on q.trace_id = k.trace_id and q.pos = k.pos
join selected_traces as s on s.trace_id = k.earlier // 4294967296
where k.earlier is not null
