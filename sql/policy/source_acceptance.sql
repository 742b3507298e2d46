-- out: source_acceptance
-- grain: source
-- reads: candidates
-- params: (none)
-- Calibration: how many tokens each source's drafts got accepted, summed per source.
select
    source,
    count(*) as positions,
    sum(accepted)::bigint as accepted_sum
from candidates
where split = 'calibration'
group by source
order by source
