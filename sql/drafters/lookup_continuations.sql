-- out: lookup_continuations
-- grain: ctx_len, rank
-- reads: lookup_probes (registered by specdraft lookup), exact_continuations, selected_traces
-- params: $draft_len BIGINT
-- The global n-gram table's ranked continuations for the contexts a lookup probes, as tokens
-- (every rank: the default preset drafts each context's most supported path, which may be any).
select
    e.ctx_len,
    e.ctx_hash,
    e.rank,
    e.count,
    t.tokens[e.src_pos + 1:e.src_pos + $draft_len] as draft
from lookup_probes as p
join exact_continuations as e on e.ctx_len = p.ctx_len and e.ctx_hash = p.ctx_hash
join selected_traces as t on t.trace_id = e.src_trace_id
order by e.ctx_len desc, e.rank
