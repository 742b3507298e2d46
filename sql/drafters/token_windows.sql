-- out: token_windows
-- grain: trace_id, pos
-- reads: selected_traces
-- params: $draft_len BIGINT
-- For every position of the calibration and eval traces (pos tokens known, 0 to the trace's
-- length): its split and response position, the draft_len tokens after it and the last three
-- before it (-1: none). What the
-- candidates read at a query position (the tokens a draft must match) and the copy sources read
-- at the earlier place they copy from. Taken from one window over the traces' tokens: slicing
-- each trace's token list per position or per copy carried the whole list into every row of the
-- join, which made a run quadratic in a trace's length (a 50,000-token eval trace took the
-- candidates stage 32 s, and 69,000 tokens ran out of memory at the default --memory-limit).
with query_traces as (
    select trace_id, split, prompt_len, tokens
    from selected_traces
    where split in ('calibration', 'eval')
),
tokens as (
    -- i: the token's 1-based place, so the row of token i is position i (i tokens known)
    select trace_id, split, prompt_len, unnest(tokens) as token, unnest(range(1, len(tokens) + 1)) as i
    from query_traces
)
select
    trace_id,
    i as pos,
    -- as query_positions has them, so that candidates reads this table alone (joined to
    -- query_positions too, its statement needed a DuckDB limit of 60MB on the tests' fixture, not 34MB)
    split,
    i - prompt_len as completion_pos,
    coalesce(list(token) over (
        partition by trace_id order by i rows between 1 following and $draft_len following
    ), []::integer[]) as next_tokens,
    token as last_token,
    coalesce(lag(token, 1) over w, -1) as before_last_token,
    coalesce(lag(token, 2) over w, -1) as two_before_last_token
from tokens
window w as (partition by trace_id order by i)
union all
-- position 0 (nothing known: a trace without a prompt)
select trace_id, 0, split, -prompt_len, tokens[1:$draft_len], -1, -1, -1
from query_traces
