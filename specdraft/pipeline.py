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
from specdraft.progress import say
from specdraft.warehouse import DEFAULT_MEMORY_LIMIT, Warehouse


@dataclass
class StageTimer:
    """Each stage's wall seconds and peak resident memory in bytes (stages do not nest).

    On Linux the kernel's high-water mark (VmHWM) is reset at each stage's start, so a stage's
    peak is its own rather than the run's so far; elsewhere it is the process's peak so far. The
    reset also lowers the peak a parent process reads from getrusage, so `process_peak_rss_bytes`
    keeps the maximum of every reading.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    process_peak_rss_bytes: int = 0

    @contextmanager
    def stage(self, name: str):
        import sys

        self.process_peak_rss_bytes = max(self.process_peak_rss_bytes, peak_rss_bytes())
        reset_peak_rss()
        started = time.perf_counter()
        if sys.stderr.isatty():
            print(f"specdraft: {name} ...", file=sys.stderr)
        yield
        self.seconds[name] = round(time.perf_counter() - started, 3)
        self.peak_rss_bytes[name] = peak_rss_bytes()
        self.process_peak_rss_bytes = max(self.process_peak_rss_bytes, self.peak_rss_bytes[name])


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident memory since the last reset: VmHWM on Linux, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
        import sys
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def dataset_name_for(data: str | None, dataset: str) -> str:
    """A table-safe dataset name: the local file's stem, or the hub id's last part."""
    import re

    base = Path(str(data)).stem if data else dataset.rsplit("/", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_") or "dataset"
    return name if name[0].isalpha() else f"d_{name}"


def ingest_dataset(wh: Warehouse, cfg: RunConfig, data: str | None, dataset: str, name: str,
                   columns=None) -> tuple[Path, dict]:
    """Stages 1-3: read, tokenize and write the traces Parquet, unless it is already there.

    The stored dataset (with any `ingest --append`ed traces) is used when `data` is the input it
    was first ingested from, unchanged, or when `data` is None and it came from local files; a
    changed input is ingested afresh, replacing it.
    """
    from specdraft.ingest import ColumnMap, read_traces
    from specdraft.tokenizer import load_tokenizer
    from specdraft.traces import read_metadata, traces_path, write_traces

    path = traces_path(wh.traces_dir, name)
    source = source_signature(data, dataset, columns)
    tokenizer = load_tokenizer(cfg.tokenizer)
    meta = read_metadata(path) if path.exists() else None
    if meta is not None and meta.get("tokenizer_fingerprint") != tokenizer.fingerprint:
        raise SpecdraftError(
            f"{path}: dataset {name!r} was tokenized with {meta.get('tokenizer')}; "
            f"use another --name for {cfg.tokenizer}"
        )
    if not _use_stored(meta, data, source):
        if meta is not None and meta.get("appends"):
            say(f"{data or dataset} is not the input dataset {name!r} was ingested from, or it changed: "
                 f"ingesting it afresh, which replaces the dataset and its {len(meta['appends'])} append(s)")
        write_traces(read_traces(data, dataset, columns or ColumnMap()), tokenizer, path, source)
        meta = read_metadata(path)
    elif wh.has_table("vocab") and _cataloged_traces(wh, name) == meta.get("rows"):
        return path, meta  # already ingested and registered
    register_dataset(wh, name, path, meta, tokenizer)
    return path, meta


def _use_stored(meta: dict | None, data, source: str) -> bool:
    """Is the stored dataset the one asked for? See ingest_dataset."""
    import json

    if meta is None:
        return False
    if meta.get("source") == source:
        return True
    try:
        from_hub = "hub" in json.loads(meta.get("source") or "{}")
    except ValueError:
        from_hub = False
    return data is None and not from_hub


def _cataloged_traces(wh: Warehouse, name: str) -> int | None:
    """The dataset's traces in the catalog (differs from the file only if an append was killed
    between its rename and its commit: then the catalog is brought up to date)."""
    if not wh.has_table("datasets", "main"):
        return None
    rows = wh.query("warehouse/dataset_traces", {"name": name}).fetchall()
    return rows[0][0] if rows else None



def register_dataset(wh: Warehouse, name: str, path: Path, meta: dict, tokenizer) -> None:
    """The dataset's vocab table and as_text() macro in its schema, and its row in the catalog."""
    from specdraft.tokenizer import vocab_table

    with wh.transaction("register_dataset"):
        wh.store("vocab", vocab_table(tokenizer))
        wh.create_text_macro()
        record_dataset_version(wh, name, path, meta, meta.get("source"))


def record_dataset_version(wh: Warehouse, name: str, path: Path, meta: dict, source: str | None) -> None:
    """A row in main.dataset_versions: an ingest (source: the input's signature) or an append
    (source: a JSON record of the appended input, version and rows per split)."""
    wh.materialize(
        "warehouse/dataset_versions",
        {
            "name": name,
            "traces_path": str(path),
            "tokenizer": meta.get("tokenizer"),
            "tokenizer_fingerprint": meta.get("tokenizer_fingerprint"),
            "source": source,
            "traces": meta.get("rows"),
        },
        append=wh.has_table("dataset_versions", "main"),
        schema="main",
    )
    wh.materialize("warehouse/datasets", view=True, schema="main", persistent_view=True)


def source_signature(data: str | None, dataset: str, columns) -> str:
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


ENGINES = ("duckdb", "spark")
STAGES = ("ingest", "ngram_tables", "candidates", "calibrate", "evaluate")
# Settings each stage's output depends on (besides the traces file and earlier stages).
STAGE_SETTINGS = {
    "ngram_tables": (
        "draft_len", "max_completion_tokens", "context_lengths", "backoff_context_lengths",
        "copy_context_lengths", "max_index_positions", "backoff_max_index_positions",
        "max_continuations_per_context", "train_limit", "calibration_limit", "eval_limit",
    ),
    "candidates": ("backoff_min_context_len", "calibration_stride", "calibration_max_positions", "preset",
                   "online"),
}


def _build_key(cfg: RunConfig, meta: dict, name: str, stage: str) -> str:
    """What a stage's tables were built from: dataset, traces file (and the version of it, after
    appends), and the settings up to it."""
    from specdraft.incremental import covered_key

    fields: tuple[str, ...] = ()
    for earlier in ("ngram_tables", "candidates"):
        fields += STAGE_SETTINGS[earlier]
        if earlier == stage:
            break
    return covered_key(
        f"{name}:{meta.get('source')}:{meta.get('tokenizer_fingerprint')}:{cfg.fingerprint(*fields)}"
        f":{code_fingerprint(stage)}",
        meta,
    )


# The code each stage's tables come from (its own and the earlier stages').
STAGE_CODE = {
    "ngram_tables": ("sql/traces", "sql/ngrams", "sql/incremental", "ngrams.py", "incremental.py", "hashing.py",
                     "traces.py"),
    "candidates": ("sql/candidates", "candidates.py", "backoff_walk.py", "autocomplete.py"),
}


def code_fingerprint(stage: str) -> str:
    """Changes whenever the SQL or Python that builds a stage's tables changes, so a rerun after an
    upgrade rebuilds instead of reusing tables made by older code."""
    import hashlib

    from specdraft.warehouse import SQL_DIR

    package = Path(__file__).resolve().parent
    parts: list[str] = []
    for earlier, code in STAGE_CODE.items():
        parts += code
        if earlier == stage:
            break
    digest = hashlib.sha256()
    for part in parts:
        path = SQL_DIR / part.removeprefix("sql/") if part.startswith("sql/") else package / part
        for file in sorted(path.rglob("*.sql")) if path.is_dir() else [path]:
            digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()[:12]


def run_until(last: str, cfg: RunConfig, warehouse: Path, data: str | None, dataset: str,
              name: str | None = None, columns=None, memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
              debug: bool = False, timer: StageTimer | None = None, run_id: str | None = None,
              leave_one_out: bool = False, engine: str = "duckdb", spark_master: str | None = None):
    """Run the stages up to and including `last`, reusing tables already built for the same inputs.

    engine="spark" builds the stage-4 tables on Spark (spark_build.py) and loads them into the
    warehouse; the tables equal DuckDB's, so tables already built are reused whichever engine made them.

    Returns that stage's output: counters (ngram_tables), candidate counts (candidates), the
    policy (calibrate) or the results dict (evaluate).
    """
    from specdraft.candidates import build_candidates
    from specdraft.incremental import same_build, update_ngram_tables, update_start, updated_key
    from specdraft.ngrams import build_ngram_tables, index_counters
    from specdraft.policy import policy_for
    from specdraft.report import build_results, record_run
    from specdraft.tokenizer import load_tokenizer

    if last not in STAGES:
        raise SpecdraftError(f"unknown stage {last!r}; stages: {', '.join(STAGES)}")
    if engine not in ENGINES:
        raise SpecdraftError(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    if engine == "spark":
        from specdraft.spark_build import build_on_spark, load_into_warehouse
    timer = timer or StageTimer()
    name = name or dataset_name_for(data, dataset)
    started = time.perf_counter()
    with Warehouse(Path(warehouse), memory_limit=memory_limit, debug=debug, dataset=name) as wh:
        with timer.stage("ingest"):
            path, meta = ingest_dataset(wh, cfg, data, dataset, name, columns)
        if last == "ingest":
            return path
        tokenizer = load_tokenizer(cfg.tokenizer)
        with timer.stage("ngram_tables"):
            key = _build_key(cfg, meta, name, "ngram_tables")
            built = wh.built_with("ngram_tables")
            if not same_build(built, key):
                # traces appended since the tables were built (same settings, code): add just them
                start = update_start(wh, built, key, meta)
                spark_dir = wh.root / "spark" / name
                if start is None and engine == "spark":  # Spark writes Parquet; the load is transactional
                    spark_tables = build_on_spark(cfg, path, spark_dir, spark_master, memory_limit)
                with wh.transaction("ngram_tables"):
                    if start is not None:
                        update_ngram_tables(wh, cfg, path, start)
                    elif engine == "spark":
                        load_into_warehouse(wh, spark_dir, spark_tables)
                    else:
                        build_ngram_tables(wh, cfg, path)
                    wh.mark_built("ngram_tables", key if start is None else updated_key(key, start))
                    wh.mark_built("candidates", None)
            counters = index_counters(wh, cfg)
        if last == "ngram_tables":
            return counters
        with timer.stage("candidates"):
            key = _build_key(cfg, meta, name, "candidates")
            if wh.built_with("candidates") != key:
                with wh.transaction("candidates"):
                    build_candidates(wh, cfg, tokenizer, path)
                    wh.mark_built("candidates", key)
        if last == "candidates":
            return {"candidates": wh.row_count("candidates"), "query_positions": wh.row_count("query_positions")}
        with timer.stage("calibrate"):
            policy = policy_for(cfg.preset).calibrate(wh, cfg)
        if last == "calibrate":
            return policy
        with timer.stage("evaluate"):
            evaluation = policy.evaluate(wh, cfg, tokenizer, path)
        timer.seconds["total"] = round(time.perf_counter() - started, 3)
        timer.peak_rss_bytes["total"] = timer.process_peak_rss_bytes
        results = build_results(wh, cfg, name, meta, counters, policy, evaluation, timer.seconds)
        results["peak_rss_bytes_by_stage"] = timer.peak_rss_bytes
        dropped = wh.query("traces/dropped_traces", {
            "traces_path": str(path), "train_limit": cfg.train_limit,
            "calibration_limit": cfg.calibration_limit, "eval_limit": cfg.eval_limit,
        }).fetchall()
        results["dropped_empty_completions"] = {split: int(n) for split, n in dropped}
        if leave_one_out:
            with timer.stage("leave_one_out"):
                results["leave_one_out"] = policy.leave_one_out(wh, cfg, results)
        with wh.transaction("record_run"):
            record_run(wh, results, run_id, evaluation.positions)
        return results


def run_all(cfg: RunConfig, warehouse: Path, data: str | None, dataset: str, name: str | None = None,
            columns=None, memory_limit: str | None = DEFAULT_MEMORY_LIMIT, debug: bool = False,
            leave_one_out: bool = False, engine: str = "duckdb", spark_master: str | None = None) -> dict:
    """Run every stage; return the results dict (see report.build_results)."""
    return run_until("evaluate", cfg, warehouse, data, dataset, name, columns, memory_limit, debug,
                     leave_one_out=leave_one_out, engine=engine, spark_master=spark_master)
