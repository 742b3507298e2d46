"""Stage 8: results.json, the accepted-tokens histogram chart, and a short table for stdout."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.policy.evaluate import Evaluation
from specdraft.policy.seed import SourceAveragePolicy
from specdraft.warehouse.connection import Warehouse


def _mean(total: int, n: int) -> float:
    """statistics.mean of ints: the exact mean, rounded once."""
    return float(Fraction(total, n)) if n else 0.0


def summarize(values: np.ndarray, draft_len: int) -> dict:
    """The seed's summarize(): positions, avg_accepted, hit_rate, full_draft_rate, avg_on_hit, histogram."""
    values = np.asarray(values, dtype=np.int64)
    n = len(values)
    hits = values[values > 0]
    counts = np.bincount(values, minlength=1) if n else np.zeros(0, dtype=np.int64)
    return {
        "positions": n,
        "avg_accepted": _mean(int(values.sum()), n),
        "hit_rate": len(hits) / n if n else 0.0,
        "full_draft_rate": int((values >= draft_len).sum()) / n if n else 0.0,
        "avg_on_hit": _mean(int(hits.sum()), len(hits)),
        "histogram": {str(k): int(c) for k, c in enumerate(counts.tolist()) if c},
    }


def build_results(wh: Warehouse, cfg: RunConfig, dataset: str, meta: dict, counters: dict,
                  policy: SourceAveragePolicy, evaluation: Evaluation, timings: dict) -> dict:
    stats = {row[0]: row[1] for row in wh.query("tables/trace_stats").fetchall()}
    per_source = {}
    for name, values in evaluation.per_source.items():
        summary = summarize(values, cfg.draft_len)
        summary["proposed"] = evaluation.proposed[name]
        per_source[name] = summary
    return {
        "dataset": dataset,
        "tokenizer": {"name": meta.get("tokenizer"), "fingerprint": meta.get("tokenizer_fingerprint")},
        "train_examples": stats.get("train", 0),
        "calibration_examples": stats.get("calibration", 0),
        "eval_examples": stats.get("eval", 0),
        "draft_len": cfg.draft_len,
        **counters,
        "selected": summarize(evaluation.selected, cfg.draft_len),
        "oracle_best": summarize(evaluation.oracle_best, cfg.draft_len),
        "decode_step": summarize(evaluation.decode_step, cfg.draft_len),
        "per_source": per_source,
        **({"multi_draft": {k: summarize(v, cfg.draft_len) for k, v in evaluation.multi_draft.items()}}
           if evaluation.multi_draft else {}),
        **({"multi_draft_decode_step": {k: summarize(v, cfg.draft_len)
                                        for k, v in evaluation.multi_draft_decode.items()}}
           if evaluation.multi_draft_decode else {}),
        **({"draft_length": evaluation.draft_length} if evaluation.draft_length else {}),
        "preset": cfg.preset,
        "scenario": "online" if cfg.online else "offline",
        "policy": policy.to_dict(),
        "config": cfg.to_dict(),
        "timings_s": timings,
    }


def dropped_traces(wh: Warehouse, cfg: RunConfig, traces_path) -> dict[str, int]:
    """Rows per split skipped because their response has no tokens (the seed skips them too)."""
    rows = wh.query("tables/dropped_traces", {
        "traces_path": str(traces_path), "train_limit": cfg.train_limit,
        "calibration_limit": cfg.calibration_limit, "eval_limit": cfg.eval_limit,
    }).fetchall()
    return {split: int(n) for split, n in rows}


def new_run_id() -> str:
    import datetime
    import secrets

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def record_run(wh: Warehouse, results: dict, run_id: str | None = None, positions=None,
               models: dict | None = None, build_keys: dict[str, str] | None = None) -> str:
    """Add the run to the warehouse's runs table (and its eval positions to the dataset's
    eval_positions table, its policy's model tables, if any, to the tables they name (policy_trees,
    policy_chain_trees), the build key of each kept stage's tables it used to run_builds);
    results["run_id"] is set. A column added to eval_positions since the warehouse's older runs
    is added to its table, null in their rows (Warehouse.store)."""
    import pyarrow as pa

    results["run_id"] = run_id or new_run_id()
    build_keys = build_keys or {}
    if build_keys or not wh.has_table("run_builds"):  # (eval_position_drafts reads it)
        wh.store("run_builds", pa.table({"run_id": pa.array([results["run_id"]] * len(build_keys), pa.string()),
                                         "stage": pa.array(list(build_keys), pa.string()),
                                         "build_key": pa.array(list(build_keys.values()), pa.string())}),
                 append=wh.has_table("run_builds"))
    for table, model in (models or {}).items():
        run_ids = pa.array([results["run_id"]] * model.num_rows, pa.string())
        wh.store(table, model.add_column(0, "run_id", run_ids), append=True)
    if positions is not None:
        run_ids = pa.array([results["run_id"]] * positions.num_rows, pa.string())
        wh.store("eval_positions", positions.add_column(0, "run_id", run_ids), append=True)
        for view in ("eval_position_drafts", "top_hitting_contexts", "acceptance_by_source",
                     "acceptance_by_position", "policy_regret"):
            wh.materialize(f"report/{view}", persistent_view=True)
    wh.materialize(
        "report/runs",
        {
            "run_id": results["run_id"],
            "dataset": results["dataset"],
            "preset": results["preset"],
            "tokenizer": results["tokenizer"]["name"],
            "config": json.dumps(results["config"], sort_keys=True),
            "results": json.dumps(results, sort_keys=True),
        },
        append=wh.has_table("runs", "main"),
        schema="main",
    )
    return results["run_id"]


def load_run(warehouse: Path, run_id: str | None = None) -> dict:
    with Warehouse(warehouse, read_only=True) as wh:
        if not wh.has_table("runs", "main"):
            raise SpecdraftError(f"{warehouse}: no runs recorded yet; run `specdraft run` first")
        rows = wh.query("report/run_results", {"run_id": run_id or ""}).fetchall()
    row = rows[0] if rows else None
    if row is None:
        raise SpecdraftError(f"{warehouse}: no run with id {run_id!r}")
    return json.loads(row[0])


def write_outputs(results: dict, out: Path) -> None:
    """results.json and accepted_histogram.svg in `out`."""
    from specdraft.files import write_text
    from specdraft.report.charts import write_histogram_svg

    write_text(out / "results.json", json.dumps(results, indent=2, sort_keys=True) + "\n")
    write_histogram_svg(results, out / "accepted_histogram.svg")
