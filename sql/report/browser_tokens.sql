-- out: browser_tokens
-- grain: trace_id, pos
-- reads: selected_traces, vocab, eval_positions, browser_traces (registered by the report)
-- params: $run_id VARCHAR
-- The trace browser's text: every response token of the traces it embeds, as its vocabulary
-- piece, with what the run chose there (source, accepted, the oracle's accepted).
with response as (
    select
        t.trace_id,
        unnest(generate_series(t.prompt_len, t.n_tokens - 1)) as pos,
        unnest(t.tokens[t.prompt_len + 1:]) as token_id
    from selected_traces as t
    join browser_traces as b using (trace_id)
)
select
    r.trace_id,
    r.pos,
    coalesce(v.piece, '') as piece,
    e.source,
    e.accepted,
    e.oracle_accepted
from response as r
left join vocab as v using (token_id)
left join eval_positions as e on e.run_id = $run_id and e.trace_id = r.trace_id and e.pos = r.pos
order by r.trace_id, r.pos
