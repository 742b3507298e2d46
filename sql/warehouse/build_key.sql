-- out: build_key
-- grain: stage
-- reads: build_state
-- params: $stage VARCHAR
-- The key the stage's tables were last built with.
select
    build_key
from build_state
where stage = $stage
order by built_at desc
limit 1
