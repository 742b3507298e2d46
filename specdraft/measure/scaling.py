"""The scaling curve: the whole pipeline once per train size, in one warehouse, as the seed's
`scaling_curve` (accepted tokens per position against train rows), with a line chart.

The dataset is ingested and tokenized once; each size rebuilds the n-gram tables and everything
after them (the train limit is part of their build key) and records a run like `specdraft run`.

    specdraft scaling --data traces.parquet --preset seed --train-sizes 2000,5000,6988
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from specdraft import files
from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.progress import say
from specdraft.report.charts import text_table

DEFAULT_POINTS = 4


def parse_sizes(value: str) -> tuple[int, ...]:
    """Comma-separated positive train sizes, sorted and deduplicated.

    >>> parse_sizes("5000,2000,5000")
    (2000, 5000)
    """
    try:
        sizes = [int(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise SpecdraftError(f"train sizes must be comma-separated integers, got {value!r}") from exc
    if not sizes:
        raise SpecdraftError("train sizes must name at least one size")
    bad = [size for size in sizes if size < 1]
    if bad:
        raise SpecdraftError(f"train sizes must be >= 1, got {bad}")
    return tuple(sorted(set(sizes)))


def default_sizes(top: int, points: int = DEFAULT_POINTS) -> tuple[int, ...]:
    """A doubling series ending at `top`: top/8, top/4, top/2, top (rounded down, zeros dropped).

    >>> default_sizes(6988)
    (873, 1747, 3494, 6988)
    >>> default_sizes(3)
    (1, 3)
    """
    return tuple(sorted({top >> k for k in range(points)} - {0}))


def train_rows(traces_path: Path) -> int:
    """Train rows in the traces Parquet: what --train-limit 0 (all rows) means."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    splits = pq.read_table(traces_path, columns=["split"]).column("split")
    return int(pc.sum(pc.equal(splits, "train")).as_py() or 0)


def _label(rows: int, preset: str) -> str:
    """Short labels in the seed's style: "2k seed", "6988 seed"."""
    return f"{rows // 1000}k {preset}" if rows % 1000 == 0 else f"{rows} {preset}"



def scaling_curve(cfg: RunConfig, inputs, sizes: tuple[int, ...] | None = None) -> list[dict]:
    """Run every stage once per train size; return one point per size, smallest first.

    `sizes` are train limits (first N train rows); sizes past the train split are cut to it. Without
    them, a doubling series ending at cfg.train_limit (0 = all train rows). Each point: label, rows
    (the train limit used), train_examples (train traces after dropping empty responses), the
    indexed positions, selected / decode-step / oracle-best avg_accepted, wall_s and run_id.
    """
    from specdraft.pipeline import run_until

    path = run_until("ingest", cfg, inputs)
    available = train_rows(path)
    if available == 0:
        raise SpecdraftError(f"{path}: no train rows")
    if sizes is None:
        limits = default_sizes(min(cfg.train_limit or available, available))
    else:
        limits = tuple(sorted({min(size, available) for size in sizes}))
        if max(sizes) > available:
            say(f"the train split has {available} rows; larger sizes use all of them", always=True)
    points = []
    for i, limit in enumerate(limits, 1):
        say(f"scaling {i}/{len(limits)}: {limit} train rows")
        started = time.perf_counter()
        results = run_until("report", dataclasses.replace(cfg, train_limit=limit), inputs)
        points.append({
            "label": _label(limit, cfg.preset),
            "rows": limit,
            "avg_accepted": results["selected"]["avg_accepted"],
            "decode_step_avg_accepted": results["decode_step"]["avg_accepted"],
            "oracle_best_avg_accepted": results["oracle_best"]["avg_accepted"],
            "train_examples": results["train_examples"],
            "exact_positions_added": results["exact_positions_added"],
            "backoff_positions_added": results["backoff_positions_added"],
            "wall_s": round(time.perf_counter() - started, 3),
            # the stages whose tables this warehouse held already: their time is a warm run's
            "reused_stages": results.get("reused_stages", []),
            "preset": cfg.preset,
            "dataset": results["dataset"],
            "run_id": results["run_id"],
        })
    return points


def write_scaling(points: list[dict], out: Path) -> tuple[Path, Path]:
    """scaling.json and scaling.svg in `out`."""
    from specdraft.report.charts import write_line_chart_svg

    files.make_dirs(out)
    json_path = out / "scaling.json"
    files.write_text(json_path, json.dumps(points, indent=2) + "\n")
    dataset = points[0]["dataset"] if points else ""
    series = [
        ("selected", "selected", [(p["rows"], p["avg_accepted"]) for p in points]),
        ("decode_step", "decode step", [(p["rows"], p["decode_step_avg_accepted"]) for p in points]),
    ]
    svg_path = write_line_chart_svg(series, out / "scaling.svg",
                                    title=f"Accepted tokens per position vs train rows — {dataset}",
                                    x_label="train rows", y_label="accepted tokens per position")
    return json_path, svg_path


def scaling_table(points: list[dict]) -> str:
    """The curve as an aligned plain-text table (for stdout)."""
    header = ("train rows", "traces", "exact positions", "backoff positions", "selected", "decode step",
              "oracle best", "wall s")
    cells = [(f"{p['rows']}", f"{p['train_examples']}", f"{p['exact_positions_added']}",
              f"{p['backoff_positions_added']}", f"{p['avg_accepted']:.3f}", f"{p['decode_step_avg_accepted']:.3f}",
              f"{p['oracle_best_avg_accepted']:.3f}", f"{p['wall_s']:.1f}" + ("*" if p.get("reused_stages") else ""))
             for p in points]
    lines = text_table(header, cells)
    if any(p.get("reused_stages") for p in points):
        lines.append("* warm: this warehouse held the size's tables already (a fresh --warehouse times every stage)")
    return "\n".join(lines)
