-- out: context_occurrences
-- grain: trace_id, pos, ctx_len
-- reads: query_context_keys, query_positions
-- params: $draft_len BIGINT
-- Where the last ctx_len known tokens at a query position occurred earlier in the same trace
-- (prompt and known response), for every context length that has such a place: the latest and
-- second-latest place (recent copy), how many there are, and the latest whose draft_len tokens
-- after it are all known (prefix copy, match_pos <= pos - draft_len). One window over the trace's
-- context keys serves both copy sources: each in its own view, the development set's candidates
-- statement sorted the keys twice.
with repeated as (
    -- the contexts that occur more than once in a trace: the window sorts their places alone
    select trace_id, ctx_len, ctx_hash
    from query_context_keys
    group by all
    having count(*) > 1
),
occurrences as (
    select
        trace_id,
        pos,
        ctx_len,
        lag(pos, 1) over w as latest,
        lag(pos, 2) over w as second_latest,
        row_number() over w - 1 as earlier_occurrences,
        max(pos) over (w range between unbounded preceding and $draft_len preceding) as copy_match_pos
    from query_context_keys
    semi join repeated using (trace_id, ctx_len, ctx_hash)
    window w as (partition by trace_id, ctx_len, ctx_hash order by pos)
)
select o.*
from occurrences as o
semi join query_positions as q on q.trace_id = o.trace_id and q.pos = o.pos
where o.latest is not null
