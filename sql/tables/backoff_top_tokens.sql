-- out: backoff_top_tokens
-- grain: ctx_len, ctx_hash
-- reads: length_keys
-- params: $ctx_len INTEGER
-- The backoff drafter's pick per context: the most frequent next token (ties to the first
-- seen, as Counter.most_common), its count, and the context's total count. Built one context
-- length at a time (appended). Where the train keys are in memory and the walk's picks will be
-- too (ngrams.numpy_picks), specdraft/tables/backoff_picks.py makes these rows in numpy instead,
-- in key order.
-- A context followed by one token only (most contexts of the longer lengths) has that token as
-- its pick, without counting per token: only the contexts followed by several tokens are
-- grouped by (context, token), which saves a grouping of nearly every position at those lengths.
with contexts as (
    select
        ctx_hash,
        count(*) as total,
        min(token_id) as first_token,
        max(token_id) as last_token
    from length_keys
    where backoff_order is not null
    group by ctx_hash
)
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    first_token as token_id,
    total as count,
    total
from contexts
where first_token = last_token
union all
select
    $ctx_len::integer as ctx_len,
    ctx_hash,
    -- highest count, then first seen (seen_order < 2^32)
    arg_max(token_id, count * 4294967296 - first_seen) as token_id,
    max(count) as count,
    sum(count)::bigint as total
from (
    -- length_next_tokens' counts, of those contexts only: the filter is on the positions, before
    -- they are grouped (DuckDB does not push it through the view's grouping)
    select
        ctx_hash,
        token_id,
        count(*) as count,
        min(backoff_order) as first_seen
    from length_keys
    where backoff_order is not null
        and ctx_hash in (select ctx_hash from contexts where first_token <> last_token)
    group by ctx_hash, token_id
)
group by ctx_hash
