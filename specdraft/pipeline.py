"""The whole benchmark as one facade: ingest -> tokenize -> traces Parquet -> n-gram tables ->
candidates -> calibrate -> evaluate -> report.

Each stage is a function of earlier stages' outputs; `run_all` calls them in order, times them,
and skips the traces Parquet when the dataset is already in the warehouse with the same tokenizer
and source.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.warehouse import Warehouse


@dataclass
class StageTimer:
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str):
        import sys

        started = time.perf_counter()
        if sys.stderr.isatty():
            print(f"specdraft: {name} ...", file=sys.stderr)
        yield
        self.seconds[name] = round(time.perf_counter() - started, 3)


def dataset_name_for(data: str | None, dataset: str) -> str:
    """A table-safe dataset name: the local file's stem, or the hub id's last part."""
    import re

    base = Path(str(data)).stem if data else dataset.rsplit("/", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_") or "dataset"
    return name if name[0].isalpha() else f"d_{name}"


def ingest_dataset(wh: Warehouse, cfg: RunConfig, data: str | None, dataset: str, name: str,
                   columns=None) -> tuple[Path, dict]:
    """Stages 1-3: read, tokenize and write the traces Parquet, unless it is already there."""
    from specdraft.ingest import ColumnMap, read_traces
    from specdraft.tokenizer import load_tokenizer
    from specdraft.traces import read_metadata, traces_path, write_traces

    path = traces_path(wh.traces_dir, name)
    source = _source_signature(data, dataset, columns)
    tokenizer = load_tokenizer(cfg.tokenizer)
    if path.exists():
        meta = read_metadata(path)
        if meta.get("tokenizer_fingerprint") != tokenizer.fingerprint:
            raise SpecdraftError(
                f"{path}: dataset {name!r} was tokenized with {meta.get('tokenizer')}; "
                f"use another --name for {cfg.tokenizer}"
            )
        if meta.get("source") == source:
            return path, meta
    rows = read_traces(data, dataset, columns or ColumnMap())
    write_traces(rows, tokenizer, path, source)
    return path, read_metadata(path)


def _source_signature(data: str | None, dataset: str, columns) -> str:
    """Identifies the input: the file's path, size and modification time, or the hub id."""
    import json
    import os

    if data is None:
        return json.dumps({"hub": dataset, "columns": repr(columns)})
    paths = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    stats = []
    for p in paths:
        p = Path(p)
        files = sorted(p.iterdir()) if p.is_dir() else [p]
        stats += [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
    return json.dumps({"files": stats, "columns": repr(columns)})


def run_all(cfg: RunConfig, warehouse: Path, data: str | None, dataset: str, name: str | None = None,
            columns=None) -> dict:
    """Run every stage; return the results dict (see report.build_results)."""
    from specdraft.calibrate import calibrate
    from specdraft.candidates import build_candidates
    from specdraft.evaluate import evaluate
    from specdraft.ngrams import build_ngram_tables
    from specdraft.report import build_results
    from specdraft.tokenizer import load_tokenizer

    timer = StageTimer()
    name = name or dataset_name_for(data, dataset)
    started = time.perf_counter()
    with Warehouse(Path(warehouse)) as wh:
        with timer.stage("ingest"):
            path, meta = ingest_dataset(wh, cfg, data, dataset, name, columns)
        tokenizer = load_tokenizer(cfg.tokenizer)
        with timer.stage("ngram_tables"):
            counters = build_ngram_tables(wh, cfg, path)
        with timer.stage("candidates"):
            build_candidates(wh, cfg, tokenizer, path)
        with timer.stage("calibrate"):
            policy = calibrate(wh, cfg)
        with timer.stage("evaluate"):
            evaluation = evaluate(wh, cfg, tokenizer, path, policy)
        timer.seconds["total"] = round(time.perf_counter() - started, 3)
        return build_results(wh, cfg, name, meta, counters, policy, evaluation, timer.seconds)
