-- out: query_trace_parts
-- grain: part
-- reads: query_positions
-- params: $parts INTEGER
-- The calibration and eval traces cut into $parts runs of consecutive trace ids with about as
-- many query positions each: what candidate_features is built a run at a time from (each run's
-- groupings and joins hold a part of the whole, and its scans of candidates skip the row groups
-- of other traces).
with traces as (
    select trace_id, count(*) as positions
    from query_positions
    group by trace_id
),
parts as (
    select
        trace_id,
        floor((sum(positions) over (order by trace_id) - positions) * $parts
            / sum(positions) over ())::integer as part
    from traces
)
select
    part,
    min(trace_id) as from_trace_id,
    max(trace_id) + 1 as to_trace_id
from parts
group by part
order by part
