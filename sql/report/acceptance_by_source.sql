-- out: acceptance_by_source
-- grain: split, family, source, ctx_len
-- reads: candidates
-- params: (none)
-- (a view) Every source's drafts on the current build, by context length: how many, how often
-- they hit, their mean accepted.
select
    split,
    family,
    source,
    ctx_len,
    count(*) as drafts,
    avg((accepted > 0)::integer) as hit_rate,
    avg(accepted) as avg_accepted
from candidates
group by all
