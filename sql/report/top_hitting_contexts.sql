-- out: top_hitting_contexts
-- grain: run_id, source, ctx_tokens
-- reads: eval_positions, selected_traces
-- params: (none)
-- (a view) The contexts the chosen drafts matched on, per run and source: how often a draft after
-- that context was chosen, how often it hit (at least one token accepted), and its mean accepted.
-- ctx_tokens are the ctx_len tokens before the position; as_text(ctx_tokens) renders them. They
-- are gathered token by token (each position's ctx_len places joined to the trace's tokens):
-- slicing the trace's token list per position carried the whole list into every row, quadratic
-- in a trace's length (37 s for one 18,000-word eval trace's report).
with contexts as (
    select
        e.run_id,
        e.trace_id,
        e.pos,
        e.source,
        e.ctx_len,
        e.accepted,
        unnest(range(e.pos - e.ctx_len + 1, e.pos + 1)) as place
    from eval_positions as e
    where e.ctx_len > 0
),
tokens as (
    select trace_id, unnest(tokens) as token, unnest(range(1, len(tokens) + 1)) as place
    from selected_traces
    where split = 'eval'
),
gathered as (
    select
        c.run_id,
        c.source,
        c.ctx_len,
        c.accepted,
        list(t.token order by c.place) as ctx_tokens
    from contexts as c
    join tokens as t using (trace_id, place)
    group by c.run_id, c.trace_id, c.pos, c.source, c.ctx_len, c.accepted
)
select
    run_id,
    source,
    ctx_len,
    ctx_tokens,
    count(*) as chosen,
    count(*) filter (where accepted > 0) as hits,
    avg(accepted) as avg_accepted
from gathered
group by all
