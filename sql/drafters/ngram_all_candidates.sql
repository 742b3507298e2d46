-- out: ngram_all_candidates
-- grain: trace_id, pos, source
-- reads: query_context_keys, query_positions, exact_continuations, selected_traces
-- params: $enabled BOOLEAN, $draft_len BIGINT
-- Global n-gram at every context length that hits, not only the longest (not in the seed): the
-- most frequent continuation (family ngram-all) and the second (ngram-rank2).
with hits as (
    select
        q.trace_id,
        q.pos,
        k.ctx_len,
        e.rank,
        e.count,
        e.src_trace_id,
        e.src_pos
    from query_positions as q
    join query_context_keys as k using (trace_id, pos)
    join exact_continuations as e on e.ctx_len = k.ctx_len and e.ctx_hash = k.ctx_hash and e.rank <= 2
    where $enabled
)
select
    h.trace_id,
    h.pos,
    case h.rank when 1 then 'ngram-all' else 'ngram-rank2' end as family,
    case h.rank when 1 then 'ngram-all' else 'ngram-rank2' end || ':' || h.ctx_len as source,
    h.ctx_len,
    h.count,
    h.ctx_len * 8.0 as score,
    t.tokens[h.src_pos + 1:h.src_pos + $draft_len] as draft
from hits as h
join selected_traces as t on t.trace_id = h.src_trace_id
