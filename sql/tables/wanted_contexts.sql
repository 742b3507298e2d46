-- out: wanted_contexts
-- grain: ctx_len, ctx_hash
-- reads: query_context_keys
-- params: (none)
-- (a view) The contexts a queried build ranks continuations for (--ngram-contexts queried): every
-- context the calibration and eval positions look up, at any length. `specdraft lookup` ranks
-- those of its text instead (its probes, registered under this name).
select
    ctx_len,
    ctx_hash
from query_context_keys
