-- out: backoff_pick_count
-- grain: (one row)
-- reads: backoff_top_tokens
-- params: (none)
-- How many backoff picks there are: whether the backoff walk can hold them all in memory beside
-- DuckDB (LengthPicks.fit_beside) or looks them up with joins instead.
select
    count(*) as picks
from backoff_top_tokens
