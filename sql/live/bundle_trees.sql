-- out: bundle_trees
-- grain: tree, node
-- reads: policy_trees
-- params: $run_id VARCHAR
-- The confidence model a run recorded (--preset default), one row per tree node, as the live
-- drafter's scorer reads it (policy/trees.py).
select
    tree,
    node,
    feature,
    threshold,
    left_codes,
    "left",
    "right",
    value
from policy_trees
where run_id = $run_id
order by tree, node
