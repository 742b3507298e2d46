-- out: query_positions
-- grain: trace_id, pos
-- reads: selected_traces
-- params: $stride BIGINT, $calibration_max_positions BIGINT
-- Where drafts are asked for: every response position of eval traces, and the seed's
-- calibration sample (every stride-th response position, the first
-- calibration_max_positions of them per trace). pos counts prompt tokens too, so pos is the
-- number of known tokens; completion_pos counts from the first response token.
with response_positions as (
    select
        trace_id,
        split,
        prompt_len,
        unnest(generate_series(0, n_tokens - prompt_len - 1)) as completion_pos
    from selected_traces
    where split in ('calibration', 'eval')
)
select
    trace_id,
    split,
    prompt_len + completion_pos as pos,
    completion_pos
from response_positions
where split = 'eval'
    or (
        completion_pos % $stride = 0
        and ($calibration_max_positions = 0 or completion_pos // $stride < $calibration_max_positions)
    )
