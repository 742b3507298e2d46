-- out: browser_features
-- grain: trace_id, pos, source
-- reads: candidate_features, browser_traces (registered by the report)
-- params: (none)
-- What the confidence model sees of each eval draft of the traces the browser embeds, for
-- scoring them with the run's trees.
select
    f.*
from candidate_features as f
join browser_traces as b using (trace_id)
where f.split = 'eval'
order by f.trace_id, f.pos, f.family_order, f.ctx_len
