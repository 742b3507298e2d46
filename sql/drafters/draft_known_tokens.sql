-- out: draft_known_tokens
-- grain: candidate_row
-- reads: candidates, selected_traces, query_positions
-- params: $from_trace_id BIGINT, $to_trace_id BIGINT, $unseen_distance INTEGER
-- (a build intermediate, a run of traces at a time: candidate_features reads it) Whether the text
-- known at a draft's position already uses the draft's tokens, which a trace that has not used a
-- token yet is less likely to write next: how many of its first 8 tokens occur there, how often
-- its first does, and how many tokens back it last did ($unseen_distance: never, or no token).
-- Its own statement: inside candidate_features, its joins raised the smallest DuckDB share that
-- statement ran in on the tests' parity fixture from 42MB to over 66MB.
with known_tokens as (
    -- every token of the traces' known text: where it is (from 0, so a position's known text is
    -- the tokens before it) and its how-manieth occurrence in the trace
    select trace_id, token, token_pos, row_number() over (partition by trace_id, token order by token_pos) as occurrence
    from (
        select t.trace_id, unnest(t.tokens) as token, generate_subscripts(t.tokens, 1) - 1 as token_pos
        from selected_traces as t
        semi join query_positions as q on q.trace_id = t.trace_id
        where t.trace_id >= $from_trace_id and t.trace_id < $to_trace_id
    )
),
first_known as (
    select trace_id, token, min(token_pos) as first_pos
    from known_tokens
    group by trace_id, token
),
latest as (
    -- the first token's latest occurrence before the position, once per position and token: the
    -- development set's 1.09M drafts start with 302k (position, token) pairs, and the statement
    -- took 0.47-0.53 s against 0.62-0.73 s joining every draft as of its position
    select f.trace_id, f.pos, f.token, o.occurrence, o.token_pos
    from (
        select distinct trace_id, pos, draft[1] as token
        from candidates
        where trace_id >= $from_trace_id and trace_id < $to_trace_id and len(draft) > 0
    ) as f
    asof left join known_tokens as o on o.trace_id = f.trace_id and o.token = f.token and o.token_pos < f.pos
)
select
    -- the draft's row of candidates, which candidate_features joins on (one integer, not the
    -- grain's three columns)
    d.rowid as candidate_row,
    ((latest.occurrence is not null)::integer
        + coalesce(k2.first_pos < d.pos, false)::integer
        + coalesce(k3.first_pos < d.pos, false)::integer
        + coalesce(k4.first_pos < d.pos, false)::integer
        + coalesce(k5.first_pos < d.pos, false)::integer
        + coalesce(k6.first_pos < d.pos, false)::integer
        + coalesce(k7.first_pos < d.pos, false)::integer
        + coalesce(k8.first_pos < d.pos, false)::integer)::integer as seen_tokens8,
    coalesce(latest.occurrence, 0)::integer as first_token_count,
    coalesce(d.pos - latest.token_pos, $unseen_distance)::integer as first_token_distance
from candidates as d
left join latest on latest.trace_id = d.trace_id and latest.pos = d.pos and latest.token = d.draft[1]
left join first_known as k2 on k2.trace_id = d.trace_id and k2.token = d.draft[2]
left join first_known as k3 on k3.trace_id = d.trace_id and k3.token = d.draft[3]
left join first_known as k4 on k4.trace_id = d.trace_id and k4.token = d.draft[4]
left join first_known as k5 on k5.trace_id = d.trace_id and k5.token = d.draft[5]
left join first_known as k6 on k6.trace_id = d.trace_id and k6.token = d.draft[6]
left join first_known as k7 on k7.trace_id = d.trace_id and k7.token = d.draft[7]
left join first_known as k8 on k8.trace_id = d.trace_id and k8.token = d.draft[8]
where d.trace_id >= $from_trace_id and d.trace_id < $to_trace_id
