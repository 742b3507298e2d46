-- out: ngram_path_drafts
-- grain: ctx_len, ctx_hash, rank
-- reads: exact_continuations
-- params: $ctx_len INTEGER
-- The ranked continuations of every context of one length that has two or more, with their
-- counts and where their tokens start, in context and rank order: what drafters/ngram_paths.py
-- chooses each context's most supported path from (a context with one continuation has no choice
-- to make). A length at a time, so that the token matrix stays small where every train context is
-- ranked; the tokens are gathered in numpy from train_tokens.sql's (slicing them here copied each
-- source trace's token list into every row: 1.3 s of 1.5 s on the development set).
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
    e.src_trace_id,
    e.src_pos
from exact_continuations as e
semi join several as s on s.ctx_len = e.ctx_len and s.ctx_hash = e.ctx_hash
where e.ctx_len = $ctx_len
order by e.ctx_hash, e.rank
