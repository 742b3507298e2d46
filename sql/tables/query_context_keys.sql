-- out: query_context_keys
-- grain: trace_id, pos, ctx_len
-- reads: query_position_keys
-- params: $ctx_len INTEGER[]
-- Context keys of calibration and eval traces, at every position and every copy and n-gram
-- context length: what the copy and n-gram sources look up. One select per length (its
-- key_<L> column of query_position_keys, position_keys.sql over those traces), after an empty
-- first one that gives the types.
select
    cast(null as bigint) as trace_id,
    cast(null as bigint) as pos,
    cast(null as integer) as ctx_len,
    cast(null as bigint) as ctx_hash
from query_position_keys
where false
union all select trace_id, pos, {ctx_len}, key_{ctx_len} from query_position_keys where key_{ctx_len} is not null
