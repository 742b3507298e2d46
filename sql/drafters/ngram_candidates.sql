-- out: ngram_candidates
-- grain: trace_id, pos
-- reads: query_context_keys, query_positions, ngram_choices, selected_traces
-- params: $context_lengths INTEGER[], $draft_len BIGINT
-- Global n-gram: the longest context length whose last known tokens were seen in train; its
-- first choice of continuation (ngram_choices.sql: under --preset seed the most frequent, rank 1).
-- The score's log1p(count) term is added in Python.
with hits as materialized (
    select
        q.trace_id,
        q.pos,
        max(k.ctx_len) as ctx_len,
        arg_max(e.count, k.ctx_len) as count,
        arg_max(e.src_trace_id, k.ctx_len) as src_trace_id,
        arg_max(e.src_pos, k.ctx_len) as src_pos
    from query_positions as q
    join query_context_keys as k using (trace_id, pos)
    join ngram_choices as e on e.ctx_len = k.ctx_len and e.ctx_hash = k.ctx_hash and e.choice = 1
    where list_contains($context_lengths, k.ctx_len)
    group by q.trace_id, q.pos
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
    'ngram' as family,
    'ngram:' || h.ctx_len as source,
    h.ctx_len,
    h.count,
    h.ctx_len * 8.0 as score,
    c.draft
from hits as h
join continuations as c using (src_trace_id, src_pos)
