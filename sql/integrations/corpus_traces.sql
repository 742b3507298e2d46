-- out: corpus_traces
-- grain: trace_id
-- reads: selected_traces
-- params: (none)
-- The train traces as the run's tables were built from them (limits applied, responses cut), in
-- trace order: what `specdraft export --format sglang-corpus` writes, and the tokens of a drafter
-- bundle's store (live/bundle_store.sql), with each prompt's length.
select
    trace_id,
    prompt_len,
    tokens
from selected_traces
where split = 'train'
order by trace_id
