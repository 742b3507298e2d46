-- out: key_lengths
-- grain: ctx_len
-- reads: (parameters only)
-- params: $context_lengths INTEGER[], $backoff_context_lengths INTEGER[], $copy_context_lengths INTEGER[]
-- Every context length some source looks up, and which sources use it.
with lengths as (
    select distinct unnest(list_concat($context_lengths, $backoff_context_lengths, $copy_context_lengths)) as ctx_len
)
select
    ctx_len::integer as ctx_len,
    list_contains($context_lengths, ctx_len) as for_ngram,
    list_contains($backoff_context_lengths, ctx_len) as for_backoff,
    list_contains($copy_context_lengths, ctx_len) as for_copy
from lengths
