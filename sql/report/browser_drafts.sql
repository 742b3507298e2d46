-- out: browser_drafts
-- grain: trace_id, pos, source
-- reads: candidates, browser_traces (registered by the report)
-- params: (none)
-- Every source's draft at each eval position of the traces the browser embeds: its tokens (the
-- report renders them with vocab_pieces), its accepted length, and what the policy scores it by
-- (candidate order: family, context length).
select
    c.trace_id,
    c.pos,
    c.source,
    c.family,
    c.ctx_len,
    c.count,
    c.score,
    c.accepted,
    c.draft
from candidates as c
join browser_traces as b using (trace_id)
where c.split = 'eval'
order by c.trace_id, c.pos, c.family_order, c.ctx_len
