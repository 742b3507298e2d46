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
    wh.materialize("ngrams/trace_tokens")
    wh.materialize("ngrams/prefix_hashes_start")
    longest = wh.con.execute("select coalesce(max(n_tokens), 0) from selected_traces").fetchone()[0]
    span = 1
    while span < longest:
        wh.materialize("ngrams/prefix_hashes", {"span": span, **power_params(span), **hash_params()})
        span *= 2


def key_lengths(cfg: RunConfig) -> tuple[int, ...]:
    """Every context length some source looks up."""
    return tuple(sorted(set(cfg.context_lengths) | set(cfg.backoff_context_lengths) | set(cfg.copy_context_lengths)))


def build_context_keys(wh: Warehouse, cfg: RunConfig) -> None:
    wh.con.execute("create or replace table context_keys (trace_id bigint, pos bigint, ctx_len integer, ctx_hash bigint)")
    for ctx_len in key_lengths(cfg):
        wh.materialize(
            "ngrams/context_keys",
            {"ctx_len": ctx_len, **power_params(ctx_len), **hash_params()},
            append=True,
        )


def build_exact_continuations(wh: Warehouse, cfg: RunConfig) -> None:
    wh.materialize(
        "ngrams/continuation_keys",
        {"draft_len": cfg.draft_len, **power_params(cfg.draft_len), **hash_params()},
    )
    wh.materialize(
        "ngrams/exact_positions", {"draft_len": cfg.draft_len, "max_positions": cfg.max_index_positions}
    )
    wh.materialize(
        "ngrams/exact_continuations",
        {"context_lengths": list(cfg.context_lengths), "top_k": cfg.max_continuations_per_context},
    )


def build_backoff_tables(wh: Warehouse, cfg: RunConfig) -> None:
    wh.materialize("ngrams/backoff_positions", {"max_positions": cfg.backoff_max_index_positions})
    wh.materialize(
        "ngrams/backoff_next_tokens", {"backoff_context_lengths": list(cfg.backoff_context_lengths)}
    )
    wh.materialize("ngrams/backoff_top_tokens")


def build_ngram_tables(wh: Warehouse, cfg: RunConfig, traces_path: Path) -> dict[str, int]:
    """Build every stage-4 table; return the seed's positions_added counters."""
    build_selected_traces(wh, cfg, traces_path)
    build_prefix_hashes(wh)
    build_context_keys(wh, cfg)
    build_exact_continuations(wh, cfg)
    build_backoff_tables(wh, cfg)
    return {
        "exact_positions_added": wh.row_count("exact_positions"),
        "backoff_positions_added": wh.row_count("backoff_positions"),
    }
