-- out: position_text
-- grain: trace_id, pos
-- reads: selected_traces, vocab (through as_text), compare_examples (registered by specdraft compare)
-- params: $before BIGINT, $after BIGINT
-- For each example position, the text of the $before tokens before it (what a drafter saw last)
-- and of the $after tokens from it on (what its drafts had to match), for `specdraft compare --html`.
select
    e.trace_id,
    e.pos,
    as_text(t.tokens[greatest(e.pos - $before + 1, 1):e.pos]) as before_text,
    as_text(t.tokens[e.pos + 1:e.pos + $after]) as after_text
from compare_examples as e
join selected_traces as t using (trace_id)
order by e.trace_id, e.pos
