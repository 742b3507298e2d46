"""Stage 4: the n-gram tables, built in DuckDB from the traces Parquet.

    selected_traces -> trace_tokens -> prefix_hashes -> context_keys
                                    -> exact_positions -> exact_continuations
                                    -> backoff_positions -> backoff_next_tokens -> backoff_top_tokens

Every table comes from one file in sql/; Python only loops over the (few) context lengths
and the doubling steps of the prefix scan, never over positions.
"""

from __future__ import annotations

from pathlib import Path

from specdraft.config import RunConfig
from specdraft.hashing import hash_params, power_params
from specdraft.warehouse import Warehouse


def build_selected_traces(wh: Warehouse, cfg: RunConfig, traces_path: Path) -> None:
    wh.materialize(
        "traces/selected_traces",
        {
            "traces_path": str(traces_path),
            "train_limit": cfg.train_limit,
            "calibration_limit": cfg.calibration_limit,
            "eval_limit": cfg.eval_limit,
            "max_completion_tokens": cfg.max_completion_tokens,
        },
    )


def build_prefix_hashes(wh: Warehouse) -> None:
    """Inclusive prefix hashes of every trace, by a doubling scan (log2 of the longest trace steps)."""
    wh.materialize("ngrams/trace_tokens", temp=True)
    wh.materialize("ngrams/prefix_hashes_start", temp=True)
    longest = max((row[4] for row in wh.query("traces/trace_stats").fetchall()), default=0)
    span = 1
    while span < longest:
        wh.materialize("ngrams/prefix_hashes", {"span": span, **power_params(span), **hash_params()}, temp=True)
        span *= 2


def key_lengths(cfg: RunConfig) -> tuple[int, ...]:
    """Every context length some source looks up."""
    return tuple(sorted(set(cfg.context_lengths) | set(cfg.backoff_context_lengths) | set(cfg.copy_context_lengths)))


def build_context_keys(wh: Warehouse, cfg: RunConfig) -> None:
    for i, ctx_len in enumerate(key_lengths(cfg)):
        params = {"ctx_len": ctx_len, **power_params(ctx_len), **hash_params()}
        wh.materialize("ngrams/context_keys", params, append=i > 0, temp=True)
    wh.materialize("ngrams/query_context_keys")


def build_exact_continuations(wh: Warehouse, cfg: RunConfig) -> None:
    wh.materialize(
        "ngrams/continuation_keys",
        {"draft_len": cfg.draft_len, **power_params(cfg.draft_len), **hash_params()},
        temp=True,
    )
    wh.materialize(
        "ngrams/exact_positions",
        {"draft_len": cfg.draft_len, "max_positions": cfg.max_index_positions},
        temp=True,
    )
    wh.materialize(
        "ngrams/exact_continuations",
        {"context_lengths": list(cfg.context_lengths), "top_k": cfg.max_continuations_per_context},
    )


def build_backoff_tables(wh: Warehouse, cfg: RunConfig) -> None:
    wh.materialize("ngrams/backoff_positions", {"max_positions": cfg.backoff_max_index_positions}, temp=True)
    wh.materialize(
        "ngrams/backoff_next_tokens", {"backoff_context_lengths": list(cfg.backoff_context_lengths)}
    )
    wh.materialize("ngrams/backoff_top_tokens")


def build_ngram_tables(wh: Warehouse, cfg: RunConfig, traces_path: Path) -> None:
    """Build every stage-4 table. Intermediates are temp tables; what analysts and later stages
    read (selected_traces, query_context_keys, exact_continuations, backoff_*) is kept."""
    build_selected_traces(wh, cfg, traces_path)
    build_prefix_hashes(wh)
    build_context_keys(wh, cfg)
    build_exact_continuations(wh, cfg)
    build_backoff_tables(wh, cfg)
    for table in ("context_keys", "prefix_hashes", "trace_tokens", "continuation_keys"):
        wh.drop(table)


def index_counters(wh: Warehouse, cfg: RunConfig) -> dict[str, int]:
    """The seed's exact_positions_added and backoff_positions_added."""
    params = {
        "draft_len": cfg.draft_len,
        "max_index_positions": cfg.max_index_positions,
        "backoff_max_index_positions": cfg.backoff_max_index_positions,
    }
    (exact, backoff), = wh.query("ngrams/index_counters", params).fetchall()
    return {"exact_positions_added": int(exact), "backoff_positions_added": int(backoff)}
