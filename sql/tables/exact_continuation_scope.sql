-- out: exact_continuation_scope
-- grain: (one row)
-- reads: (parameters only)
-- params: $contexts VARCHAR, $draft_len BIGINT, $max_index_positions BIGINT, $max_continuations_per_context BIGINT
-- Which train contexts exact_continuations ranks: 'queried', those calibration and eval look up
-- (--ngram-contexts queried, the default), or 'all', every train context (--ngram-contexts all,
-- or --keep-counts); and the settings it was ranked with, which `specdraft lookup` ranks its own
-- text's contexts with where the table holds only the queried ones (`export` has the run's). A
-- warehouse built before this table existed ranked every context.
select
    $contexts::varchar as contexts,
    $draft_len::bigint as draft_len,
    $max_index_positions::bigint as max_index_positions,
    $max_continuations_per_context::bigint as max_continuations_per_context
