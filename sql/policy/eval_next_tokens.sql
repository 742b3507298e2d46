-- out: eval_next_tokens
-- grain: row
-- reads: token_windows, wanted_windows (registered by evaluate.py: row, trace_id, pos)
-- params: (none)
-- The trace's next draft_len tokens at the eval positions wanted_windows lists, in its order: what
-- the chained drafts' last tokens are matched against where the choice they continue is shorter
-- than the pick (evaluate.chained_acceptance).
select
    w.row,
    t.next_tokens
from wanted_windows as w
join token_windows as t on t.trace_id = w.trace_id and t.pos = w.pos
order by w.row
