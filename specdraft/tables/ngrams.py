"""Stage 4: the n-gram tables, built in DuckDB from the traces Parquet.

    selected_traces -> trace_positions (+ hash_powers, key_lengths) -> context_keys (a view)
        -> query_context_keys
        -> exact_continuation_counts -> exact_continuations
        -> backoff_next_tokens -> backoff_top_tokens

Every table comes from one file in sql/; Python only loops over the doubling steps of the
hash powers (log2 of the longest trace), never over positions. An incremental update after
`specdraft ingest --append` (incremental.py) runs the same files over the appended traces alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from specdraft.config import RunConfig
from specdraft.progress import progress
from specdraft.tables.hashing import hash_params, inverse_params, power_params
from specdraft.warehouse.connection import Warehouse


class Rows(Protocol):
    def fetchall(self) -> list[tuple]: ...


class TableBuilder(Protocol):
    """What the stage-4 build needs of an engine, and all it uses: warehouse.connection.Warehouse
    (DuckDB) and tables.spark.SparkTables (Spark) implement it."""

    def materialize(self, name: str, params: dict[str, Any] | None = None, *, append: bool = False,
                    temp: bool = False, view: bool = False) -> None:
        """Run sql/<name>.sql into its out table: kept, temp=True an intermediate, view=True a view;
        append=True adds rows."""

    def query(self, name: str, params: dict[str, Any] | None = None) -> Rows:
        """Run sql/<name>.sql for its rows."""

    def drop(self, *tables: str) -> None:
        """Forget intermediates."""

    def drop_view(self, view: str) -> None: ...


def build_selected_traces(wh: TableBuilder, cfg: RunConfig, traces_path: Path, from_trace_id: int = 0) -> None:
    """The selected traces, or (from_trace_id > 0) add those from that trace on."""
    wh.materialize(
        "tables/selected_traces",
        {
            "traces_path": str(traces_path),
            "train_limit": cfg.train_limit,
            "calibration_limit": cfg.calibration_limit,
            "eval_limit": cfg.eval_limit,
            "max_completion_tokens": cfg.max_completion_tokens,
            "from_trace_id": from_trace_id,
        },
        append=from_trace_id > 0,
    )


def build_hash_powers(wh: TableBuilder) -> None:
    """B^pos and B^-pos for every position of the longest trace, by doubling."""
    wh.materialize("tables/hash_powers_start", temp=True)
    longest = max((row[4] for row in wh.query("tables/trace_stats").fetchall()), default=0)
    span = 1
    while span < longest:
        params = {"span": span, **power_params(span), **inverse_params(span), **hash_params()}
        wh.materialize("tables/hash_powers", params, append=True)
        span *= 2


def build_trace_positions(wh: TableBuilder, cfg: RunConfig, from_trace_id: int = 0) -> None:
    """Positions (and the context_keys view over them) of the selected traces from from_trace_id on."""
    tail = power_params(cfg.draft_len - 1)
    wh.materialize(
        "tables/trace_positions",
        {
            "draft_len": cfg.draft_len,
            "from_trace_id": from_trace_id,
            "max_index_positions": cfg.max_index_positions,
            "backoff_max_index_positions": cfg.backoff_max_index_positions,
            "tail1": tail["pow1"],
            "tail2": tail["pow2"],
            **inverse_params(1),
            **hash_params(),
        },
        temp=True,
    )
    wh.materialize(
        "tables/key_lengths",
        {
            "context_lengths": list(cfg.context_lengths),
            "backoff_context_lengths": list(cfg.backoff_context_lengths),
            "copy_context_lengths": list(cfg.copy_context_lengths),
        },
        temp=True,
    )
    wh.materialize("tables/context_keys", view=True)


def build_per_length(wh: TableBuilder, name: str, lengths, params: dict) -> None:
    """One statement per context length, appended: each grouping is a twelfth of the whole, so
    large builds stay within the memory limit."""
    for i, ctx_len in enumerate(lengths):
        wh.materialize(name, {**params, "ctx_len": ctx_len}, append=i > 0)


def build_ngram_tables(wh: TableBuilder, cfg: RunConfig, traces_path: Path) -> None:
    """Build every stage-4 table. Intermediates are temp tables; what analysts and later stages
    read (selected_traces, query_context_keys, exact_continuation_counts, exact_continuations,
    backoff_*) is kept."""
    steps = [
        lambda: build_selected_traces(wh, cfg, traces_path),
        lambda: build_hash_powers(wh),
        lambda: build_trace_positions(wh, cfg),
        lambda: wh.materialize("tables/query_context_keys"),
        lambda: build_per_length(wh, "tables/exact_continuation_counts", cfg.context_lengths, {}),
        lambda: build_per_length(wh, "tables/exact_continuations", cfg.context_lengths,
                                 {"top_k": cfg.max_continuations_per_context}),
        lambda: build_per_length(wh, "tables/backoff_next_tokens", cfg.backoff_context_lengths, {}),
        lambda: wh.materialize("tables/backoff_top_tokens"),
    ]
    for step in progress(steps, desc="n-gram tables", unit="table"):
        step()
    wh.drop_view("context_keys")
    wh.drop("trace_positions", "key_lengths", "hash_powers")


def index_counters(wh: Warehouse, cfg: RunConfig) -> dict[str, int]:
    """The seed's exact_positions_added and backoff_positions_added."""
    params = {
        "draft_len": cfg.draft_len,
        "max_index_positions": cfg.max_index_positions,
        "backoff_max_index_positions": cfg.backoff_max_index_positions,
    }
    (exact, backoff), = wh.query("tables/index_counters", params).fetchall()
    return {"exact_positions_added": int(exact), "backoff_positions_added": int(backoff)}
