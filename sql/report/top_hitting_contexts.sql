-- out: top_hitting_contexts
-- grain: run_id, source, ctx_tokens
-- reads: eval_positions, selected_traces
-- params: (none)
-- (a view) The contexts the chosen drafts matched on, per run and source: how often a draft after
-- that context was chosen, how often it hit (at least one token accepted), and its mean accepted.
-- ctx_tokens are the ctx_len tokens before the position; as_text(ctx_tokens) renders them.
select
    e.run_id,
    e.source,
    e.ctx_len,
    t.tokens[e.pos - e.ctx_len + 1:e.pos] as ctx_tokens,
    count(*) as chosen,
    count(*) filter (where e.accepted > 0) as hits,
    avg(e.accepted) as avg_accepted
from eval_positions as e
join selected_traces as t using (trace_id)
where e.ctx_len > 0
group by all
