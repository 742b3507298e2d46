"""Stage 4, incremental: after `specdraft ingest --append`, bring the n-gram tables up to date from
the appended traces alone instead of rebuilding them.

    selected_traces           += the appended traces within the limits
    train keys (train_keys.py)  = their train positions only, in train order after every earlier trace
    query_position_keys        = their calibration and eval positions
    query_context_keys        += their calibration and eval keys
    exact_continuation_counts <- merged with the appended traces' counts (the delta)
    exact_continuations       <- re-ranked, for the contexts the delta touched only
    backoff_next_tokens       <- merged with the delta
    backoff_top_tokens        <- recomputed, for the contexts the delta touched only

The delta tables come from the full build's own sql/ files run over the appended positions, so a
count is made the same way both times; the merges are DuckDB MERGE statements (sql/tables/incremental/).
Appended rows follow every earlier row of their split, so earlier traces keep their train order and
index positions, and the limits and index caps cut the appended traces exactly where a full build
over the whole file cuts them: the tables equal a full rebuild's (tests/test_append.py).

What the tables cover is in build_state: an ngram_tables build key ends in
`|traces=N|version=V`, the dataset version they were built from (traces.dataset_versions), and
an update adds `|updated_from=M`, the first trace it added.
"""

from __future__ import annotations

import re
from pathlib import Path

from specdraft.config import RunConfig
from specdraft.progress import progress
from specdraft.sources.traces import dataset_versions
from specdraft.tables.ngrams import (
    build_hash_powers,
    build_per_length,
    build_position_keys,
    build_selected_traces,
    count_tables,
    query_lengths,
)
from specdraft.warehouse.connection import Warehouse

# The stage-4 tables an update merges into; without any of them (the counts are kept with
# --keep-counts only), rebuild.
KEPT_TABLES = ("selected_traces", "query_context_keys", "exact_continuation_counts", "exact_continuations",
               "backoff_next_tokens", "backoff_top_tokens")
_UPDATED = re.compile(r"\|updated_from=\d+$")


def covered_key(base: str, meta: dict) -> str:
    """A build key that also names the dataset version the tables cover.

    >>> covered_key("k", {"rows": 7, "appends": [{"first_trace_id": 5, "traces": 2, "version": "ab"}]})
    'k|traces=7|version=ab'
    """
    traces, version = dataset_versions(meta)[-1]
    return f"{base}|traces={traces}|version={version}"


def updated_key(key: str, from_trace_id: int) -> str:
    """The key recorded after an update: the same tables as a full build's, reached from `from_trace_id`."""
    return f"{key}|updated_from={from_trace_id}"


def same_build(built: str | None, key: str) -> bool:
    """Were the tables built (or updated) for exactly this key?

    >>> same_build("k|traces=7|version=ab|updated_from=5", "k|traces=7|version=ab")
    True
    """
    return built is not None and _UPDATED.sub("", built) == key


def update_start(wh: Warehouse, built: str | None, key: str, meta: dict) -> int | None:
    """The first trace the tables lack, when they were built from an earlier version of this
    dataset with the same settings and code (update from there); None when they must be rebuilt."""
    if built is None or not all(wh.has_table(table) for table in KEPT_TABLES):
        return None
    old = _UPDATED.sub("", built).rsplit("|", 2)
    new = key.rsplit("|", 2)
    if len(old) != 3 or len(new) != 3 or old[0] != new[0]:
        return None  # other settings, code, dataset or source
    for traces, version in dataset_versions(meta)[:-1]:
        if old[1:] == [f"traces={traces}", f"version={version}"]:
            return traces
    return None


def update_ngram_tables(wh: Warehouse, cfg: RunConfig, traces_path: Path, from_trace_id: int) -> None:
    """Add the traces from `from_trace_id` on (appended since the tables were built with the same
    settings) to every stage-4 table, hashing only their positions. DuckDB only."""
    keys = {}  # the appended train positions (train_keys.TrainKeys)
    steps = [
        lambda: build_selected_traces(wh, cfg, traces_path, from_trace_id),
        lambda: build_hash_powers(wh),
        lambda: keys.setdefault("train", build_position_keys(wh, cfg, from_trace_id)),
        lambda: wh.materialize("tables/query_context_keys", {"ctx_len": query_lengths(cfg)}, append=True),
        lambda: wh.drop("query_position_keys"),
        # sql/tables/<count table>.sql over the appended positions, into temp <count table>_delta
        lambda: build_per_length(wh, count_tables(cfg), into=lambda name: f"{name.rsplit('/', 1)[-1]}_delta",
                                 keys=keys["train"]),
        lambda: wh.apply("tables/incremental/exact_continuation_counts"),
        lambda: wh.apply("tables/incremental/exact_continuations", {"top_k": cfg.max_continuations_per_context}),
        lambda: wh.apply("tables/incremental/backoff_next_tokens"),
        lambda: wh.apply("tables/incremental/backoff_top_tokens"),
    ]
    for step in progress(steps, desc="n-gram update", unit="step"):
        step()
    wh.drop("exact_continuation_counts_delta", "backoff_next_tokens_delta")
