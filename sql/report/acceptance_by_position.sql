-- out: acceptance_by_position
-- grain: run_id, position_bucket
-- reads: eval_positions
-- params: (none)
-- (a view) Mean accepted by where in the response the position is, in buckets of 32 tokens.
select
    run_id,
    completion_pos // 32 * 32 as position_bucket,
    count(*) as positions,
    avg(accepted) as avg_accepted,
    avg(oracle_accepted) as avg_oracle_accepted
from eval_positions
group by all
