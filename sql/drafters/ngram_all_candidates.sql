-- out: ngram_all_candidates
-- grain: trace_id, pos, source
-- reads: query_context_keys, query_positions, ngram_choices, selected_traces
-- params: $enabled BOOLEAN, $rank2 BOOLEAN, $draft_len BIGINT
-- Global n-gram at every context length that hits, not only the longest (not in the seed): the
-- context's first choice of continuation (family ngram-all) and, where $rank2 (runs before
-- 2026-12-06), its second (ngram-rank2), as ngram_choices.sql chooses them.
with hits as materialized (
    select
        q.trace_id,
        q.pos,
        k.ctx_len,
        e.choice,
        e.count,
        e.src_trace_id,
        e.src_pos
    from query_positions as q
    join query_context_keys as k using (trace_id, pos)
    join ngram_choices as e on e.ctx_len = k.ctx_len and e.ctx_hash = k.ctx_hash
    where $enabled and (e.choice = 1 or $rank2)
),
-- each continuation's tokens sliced once (hits share a few first-seen places: 794,373 n-gram-all
-- hits come from 97,305 on the development set); a slice per hit would copy the source trace's
-- whole token list into every hit row of the join
continuations as materialized (
    select
        s.src_trace_id,
        s.src_pos,
        t.tokens[s.src_pos + 1:s.src_pos + $draft_len] as draft
    from (select distinct src_trace_id, src_pos from hits) as s
    join selected_traces as t on t.trace_id = s.src_trace_id
)
select
    h.trace_id,
    h.pos,
    case h.choice when 1 then 'ngram-all' else 'ngram-rank2' end as family,
    case h.choice when 1 then 'ngram-all' else 'ngram-rank2' end || ':' || h.ctx_len as source,
    h.ctx_len,
    h.count,
    h.ctx_len * 8.0 as score,
    c.draft
from hits as h
join continuations as c using (src_trace_id, src_pos)
