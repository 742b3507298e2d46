-- out: exact_continuation_scope
-- grain: (one row)
-- reads: (parameters only)
-- params: $contexts VARCHAR
-- Which train contexts exact_continuations ranks: 'queried', those calibration and eval look up
-- (--ngram-contexts queried, the default), or 'all', every train context (--ngram-contexts all,
-- or --keep-counts). `specdraft export` and `lookup` read it to know whether to rank the contexts
-- they need themselves. A warehouse built before this table existed ranked every context.
select
    $contexts::varchar as contexts
