-- out: ngram_path_drafts
-- grain: ctx_len, ctx_hash, rank
-- reads: exact_continuations, selected_traces
-- params: $ctx_len INTEGER, $draft_len BIGINT
-- The ranked continuations of every context of one length that has two or more, with their
-- counts and tokens, in context and rank order (a length at a time, so that the token matrix
-- stays small where every train context is ranked): what drafters/ngram_paths.py chooses each context's most supported
-- path from (a context with one continuation has no choice to make).
with several as (
    select
        ctx_len,
        ctx_hash
    from exact_continuations
    where ctx_len = $ctx_len
        and rank = 2
)
select
    e.ctx_len,
    e.ctx_hash,
    e.rank,
    e.count,
    t.tokens[e.src_pos + 1:e.src_pos + $draft_len] as draft
from exact_continuations as e
semi join several as s on s.ctx_len = e.ctx_len and s.ctx_hash = e.ctx_hash
join selected_traces as t on t.trace_id = e.src_trace_id
where e.ctx_len = $ctx_len
order by e.ctx_hash, e.rank
