-- out: bundle_chain_trees
-- grain: tree, node
-- reads: policy_chain_trees
-- params: $run_id VARCHAR
-- The chain model a run recorded (--preset default, since 2026-12-07: ConfidencePolicy's
-- chain_model), one row per tree node, as the live drafter's scorer reads it (policy/trees.py).
select
    tree,
    node,
    feature,
    threshold,
    left_codes,
    "left",
    "right",
    value
from policy_chain_trees
where run_id = $run_id
order by tree, node
