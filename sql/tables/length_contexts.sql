-- out: length_contexts
-- grain: ctx_hash
-- reads: wanted_contexts
-- params: $ctx_len INTEGER
-- (a build intermediate, one context length at a time) The distinct wanted contexts of the
-- length: what queried_length_continuations keeps.
select distinct
    ctx_hash
from wanted_contexts
where ctx_len = $ctx_len
