-- out: eval_drafts
-- grain: row
-- reads: candidates, wanted_drafts (registered by evaluate.py: row, trace_id, pos, source)
-- params: (none)
-- The tokens of the eval drafts the token trees and the chosen drafts' lengths are made from, in
-- the order wanted_drafts lists them: joined on the drafts' keys, so only those drafts' tokens
-- are read and sorted: sorting every scored eval draft with its tokens (then taking the wanted
-- ones) took the development set's evaluate stage to 1.03 GiB at this step, against 0.88 GiB, and
-- the stage took 3.43-3.70 s against 2.92-3.11 s.
select
    w.row,
    c.draft
from wanted_drafts as w
join candidates as c
    on c.split = 'eval' and c.trace_id = w.trace_id and c.pos = w.pos and c.source = w.source
order by w.row
