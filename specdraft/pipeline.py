"""The whole benchmark as one declared sequence of stages:

    ingest (sources) -> ngram_tables (tables) -> candidates (drafters) -> calibrate (policy)
    -> evaluate (policy) -> report (the results dict and its row in the runs table)

Each `Stage` is declared once in STAGES: its name, its package (specdraft/<package>/ and
sql/<package>/ hold the code its output comes from), the settings its output depends on, whether
its tables are kept in the warehouse, how it builds and what it returns. Build keys, reuse,
transactions and `mark_built` follow from the declaration (`_run_stage`): a kept stage is rebuilt,
in one transaction, exactly when its key changes, and the kept stages after it with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import specdraft
from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.measure.timer import StageTimer
from specdraft.warehouse import sql_files
from specdraft.warehouse.connection import DEFAULT_MEMORY_LIMIT, Warehouse

DEFAULT_DATASET = "vikhyatk/qwen-math-traces"
ENGINES = ("duckdb", "spark")
PACKAGE_DIR = Path(specdraft.__file__).resolve().parent
# Code every stage's output depends on, besides its package's: these modules, and the packages
# (specdraft/<package>/ and sql/<package>/) that run every stage's statements.
SHARED_CODE = ("config.py", "pipeline.py")
SHARED_PACKAGES = ("warehouse",)


@dataclass(frozen=True)
class RunInputs:
    """What a run reads, where it keeps its tables and who builds them (the settings are the
    RunConfig)."""

    warehouse: Path
    data: str | list[str] | None = None  # local files; None: the hub dataset (or the stored one)
    dataset: str = DEFAULT_DATASET  # the hub id when data is None
    name: str | None = None  # the dataset's name in the warehouse (default: from data or dataset)
    columns: Any = None  # sources.ingest.ColumnMap (None: the seed's column names)
    memory_limit: str | None = DEFAULT_MEMORY_LIMIT
    debug: bool = False
    engine: str = "duckdb"  # who builds the n-gram tables: duckdb, or spark
    spark_master: str | None = None

    @property
    def dataset_name(self) -> str:
        from specdraft.sources.dataset import dataset_name_for

        return self.name or dataset_name_for(self.data, self.dataset)


@dataclass
class RunState:
    """What one run's stages hand on to each other."""

    cfg: RunConfig
    inputs: RunInputs
    wh: Warehouse
    timer: StageTimer
    run_id: str | None = None
    leave_one_out: bool = False
    path: Path | None = None  # the traces Parquet
    meta: dict | None = None  # its metadata
    tokenizer: Any = None
    counters: dict | None = None
    policy: Any = None
    evaluation: Any = None  # policy.evaluate.Evaluation
    build_keys: dict[str, str] = field(default_factory=dict)  # each kept stage's, as this run used it
    reused: list[str] = field(default_factory=list)  # the kept stages whose tables were built before it


@dataclass(frozen=True)
class Stage:
    name: str
    package: str  # specdraft/<package>/ and sql/<package>/
    # What the stage returns (run_until's value when it is the last stage asked for).
    output: Callable[[RunState], Any]
    # A kept stage's tables stay in the warehouse: build(run, built_key, key) makes them (inside
    # the stage's transaction) and returns the key to record, reused while the key holds.
    build: Callable[[RunState, str | None, str], str] | None = None
    settings: tuple[str, ...] = ()  # the RunConfig fields its tables depend on
    uses: tuple[str, ...] = ()  # other packages whose code its output depends on
    timed: bool = True  # its wall time and peak are in results.json's timings

    @property
    def kept(self) -> bool:
        return self.build is not None


def _ingest(run: RunState) -> Path:
    from specdraft.sources.dataset import ingest_dataset

    inputs = run.inputs
    run.path, run.meta = ingest_dataset(run.wh, run.cfg, inputs.data, inputs.dataset, inputs.dataset_name,
                                        inputs.columns)
    return run.path


def _build_ngram_tables(run: RunState, built: str | None, key: str) -> str:
    """Stage 4 in full, or from the appended traces alone when only they are new."""
    from specdraft.tables.incremental import update_ngram_tables, update_start, updated_key
    from specdraft.tables.ngrams import COUNT_TABLES, build_ngram_tables

    start = update_start(run.wh, built, key, run.meta)
    if start is not None:
        update_ngram_tables(run.wh, run.cfg, run.path, start)
        check_every_split_kept(run.wh, run.inputs.dataset_name)
        return updated_key(key, start)
    if not run.cfg.keep_counts:  # an earlier --keep-counts build's counts would be left stale
        run.wh.drop(*COUNT_TABLES)
    if run.inputs.engine == "spark":  # Spark writes Parquet, loaded here in the transaction
        from specdraft.tables.spark import build_on_spark, load_into_warehouse

        spark_dir = run.wh.root / "spark" / run.inputs.dataset_name
        tables = build_on_spark(run.cfg, run.path, spark_dir, run.inputs.spark_master, run.inputs.memory_limit)
        load_into_warehouse(run.wh, spark_dir, tables)
    else:
        with run.wh.uncached():  # each length's tables are written, and evicted, one by one
            build_ngram_tables(run.wh, run.cfg, run.path)
    check_every_split_kept(run.wh, run.inputs.dataset_name)
    return key


def check_every_split_kept(wh: Warehouse, dataset: str) -> None:
    """A run needs traces in train, calibration and eval after the limits and the seed's dropping of
    responses with no tokens: without, it measured nothing (0 positions) or exported a bundle that
    could not load. Checked in the n-gram stage's transaction, whose tables then roll back."""
    from specdraft.sources.ingest import SPLITS

    kept = {split: traces for split, traces, *_ in wh.query("tables/trace_stats").fetchall()}
    empty = [split for split in SPLITS if not kept.get(split)]
    if empty:
        raise SpecdraftError(f"dataset {dataset!r}: no {' or '.join(empty)} trace has a response left (rows past the "
                             "--*-limit flags, and responses with no tokens, are dropped as the seed does); "
                             "train, calibration and eval each need one")


def _index_counters(run: RunState) -> dict:
    from specdraft.tables.ngrams import index_counters

    run.counters = index_counters(run.wh, run.cfg)
    return run.counters


def _build_candidates(run: RunState, built: str | None, key: str) -> str:
    from specdraft.drafters.candidates import build_candidates

    with run.wh.uncached():  # its statements read the n-gram tables and each other's tables
        build_candidates(run.wh, run.cfg, _tokenizer(run), run.path)
    return key


def _candidate_counts(run: RunState) -> dict:
    return {"candidates": run.wh.row_count("candidates"), "query_positions": run.wh.row_count("query_positions")}


def _calibrate(run: RunState):
    from specdraft.policy import policy_for

    run.policy = policy_for(run.cfg.preset).calibrate(run.wh, run.cfg)
    return run.policy


def _evaluate(run: RunState):
    run.evaluation = run.policy.evaluate(run.wh, run.cfg, _tokenizer(run), run.path)
    return run.evaluation


def _report(run: RunState) -> dict:
    """The results (with the leave-one-out refits if asked), recorded as a run; the run's total
    time and peak are taken first, after every other stage has ended."""
    from specdraft.report.results import build_results, dropped_traces, record_run

    evaluation = run.evaluation
    run.timer.finish()
    results = build_results(run.wh, run.cfg, run.inputs.dataset_name, run.meta, run.counters, run.policy,
                            evaluation, run.timer.seconds)
    results["peak_rss_bytes_by_stage"] = run.timer.peak_rss_bytes
    results["reused_stages"] = run.reused  # their tables were there: their times are a warm run's
    results["dropped_empty_completions"] = dropped_traces(run.wh, run.cfg, run.path)
    if run.leave_one_out:
        with run.timer.stage("leave_one_out"):
            results["leave_one_out"] = run.policy.leave_one_out(run.wh, run.cfg, results)
    with run.wh.transaction("record_run"):
        record_run(run.wh, results, run.run_id, evaluation.positions, run.policy.model_tables(), run.build_keys)
    return results


STAGES = (
    Stage("ingest", "sources", output=_ingest),
    Stage("ngram_tables", "tables", output=_index_counters, build=_build_ngram_tables, settings=(
        "draft_len", "max_completion_tokens", "context_lengths", "backoff_context_lengths",
        "copy_context_lengths", "max_index_positions", "backoff_max_index_positions",
        "max_continuations_per_context", "train_limit", "calibration_limit", "eval_limit", "keep_counts",
        "ngram_contexts",
    )),
    # the policy's families and features decide which drafts, and which of their features, it builds
    Stage("candidates", "drafters", uses=("policy",), output=_candidate_counts, build=_build_candidates, settings=(
        # (the calibration sample as calibration_sample resolves it, --chain-model's included:
        # RunConfig.fingerprint)
        "backoff_min_context_len", "calibration_stride", "calibration_max_positions", "preset", "online",
    )),
    Stage("calibrate", "policy", output=_calibrate),
    Stage("evaluate", "policy", output=_evaluate),
    # not timed: it records the run's totals (its leave-one-out refits are timed on their own)
    Stage("report", "report", output=_report, timed=False),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
TIMED_STAGES = tuple(stage.name for stage in STAGES if stage.timed)  # results.json's timings_s


def _tokenizer(run: RunState):
    from specdraft.sources.tokenizer import load_tokenizer

    run.tokenizer = run.tokenizer or load_tokenizer(run.cfg.tokenizer)
    return run.tokenizer


def _earlier(stage: Stage) -> tuple[Stage, ...]:
    """The stages up to and including `stage`."""
    return STAGES[: STAGES.index(stage) + 1]


def code_fingerprint(stage: Stage) -> str:
    """Changes whenever the Python or SQL of a stage or of an earlier one changes (every file of
    their packages' folders, specdraft/<package>/ and sql/<package>/, those they use, and the
    shared code), so a rerun after an upgrade rebuilds instead of reusing tables made by older code."""
    files: list[Path] = [PACKAGE_DIR / name for name in SHARED_CODE]
    packages = [*SHARED_PACKAGES, *(name for s in _earlier(stage) for name in (s.package, *s.uses))]
    for package in dict.fromkeys(packages):
        for root, pattern in ((PACKAGE_DIR / package, "*.py"), (sql_files.SQL_DIR / package, "*.sql")):
            files += sorted(root.rglob(pattern))
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + file.read_bytes())
    return digest.hexdigest()[:12]


def settings_of(stage: Stage) -> tuple[str, ...]:
    """The RunConfig fields a stage's tables depend on: its own and every earlier stage's."""
    return tuple(field for s in _earlier(stage) for field in s.settings)


# build_key's layout: dataset:source:tokenizer:settings:code|traces=N|version=V..., where the
# dataset's source (a JSON of paths) may hold ':' and '|', and the last three fields neither
KEY = re.compile(r"(?P<data>.*:(?P<tokenizer>[^:|]*)):(?P<settings>[^:|]*):[^:|]*\|traces=")


def recorded_build_keys(wh: Warehouse, run_id: str) -> dict[str, str]:
    """The build key of each kept stage's tables the run used: none for runs before run_builds."""
    if not wh.has_table("run_builds"):
        return {}
    return dict(wh.query("report/run_build_keys", {"run_id": run_id}).fetchall())


def stale_stages(wh: Warehouse, results: dict) -> list[str]:
    """The kept stages whose tables in the warehouse are no longer those a recorded run used (a
    later run rebuilt them, for other settings, data or code): what the run's results no longer
    describe. Runs record each stage's build key (run_builds); for older runs, which did not, the
    settings and tokenizer they recorded are compared instead."""
    from specdraft.tables.incremental import same_build

    recorded = recorded_build_keys(wh, results["run_id"])
    if recorded:
        return [stage.name for stage in STAGES
                if stage.kept and not same_build(wh.built_with(stage.name), recorded.get(stage.name, ""))]
    cfg = RunConfig.recorded(results["config"])
    tokenizer_fingerprint = results["tokenizer"]["fingerprint"]
    stale = []
    for stage in STAGES:
        if not stage.kept:
            continue
        key = wh.built_with(stage.name)
        fields = KEY.match(key or "")
        wanted = (tokenizer_fingerprint, cfg.fingerprint(*settings_of(stage)))
        if not fields or (fields["tokenizer"], fields["settings"]) != wanted:
            stale.append(stage.name)
    return stale


def built_data(key: str | None) -> str | None:
    """The traces a build key's tables were built from, as ingested: the dataset, its input and
    tokenizer, without the settings, code and version. An append keeps every trace, and its id:
    the version it makes is the same data for the traces that were there.

    >>> built_data("ds:src:tok:settings:code|traces=7|version=ab|updated_from=5")
    'ds:src:tok'
    """
    match = KEY.match(key or "")
    return match["data"] if match else None


def run_data(wh: Warehouse, run_id: str) -> str | None:
    """The data the run's tables were built from (built_data); None for runs before run_builds."""
    return built_data(recorded_build_keys(wh, run_id).get("ngram_tables"))


def data_changed_since(wh: Warehouse, run_id: str) -> bool:
    """Was the run's dataset ingested afresh since it ran, so that the traces in the warehouse are
    no longer those it evaluated? (Appends keep them. Not known for runs before run_builds: False.)"""
    recorded = run_data(wh, run_id)
    return recorded is not None and recorded != built_data(wh.built_with("ngram_tables"))


def build_key(stage: Stage, run: RunState) -> str:
    """What a kept stage's tables are built from: the dataset, its traces file (and the version of
    it, after appends), the settings of the stages up to it, and their code."""
    from specdraft.tables.incremental import covered_key

    fields = settings_of(stage)
    meta = run.meta
    return covered_key(
        f"{run.inputs.dataset_name}:{meta.get('source')}:{meta.get('tokenizer_fingerprint')}"
        f":{run.cfg.fingerprint(*fields)}:{code_fingerprint(stage)}",
        meta,
    )


def _run_stage(stage: Stage, run: RunState):
    """One stage: (re)build its tables if it keeps any and its key changed, then its output."""
    from specdraft.tables.incremental import same_build

    with run.timer.stage(stage.name) if stage.timed else nullcontext():
        if stage.kept:
            key = run.build_keys[stage.name] = build_key(stage, run)
            built = run.wh.built_with(stage.name)
            if same_build(built, key):
                run.reused.append(stage.name)
            else:
                with run.wh.transaction(stage.name):
                    run.wh.mark_built(stage.name, stage.build(run, built, key))
                    for later in STAGES[STAGES.index(stage) + 1:]:
                        if later.kept:  # built from the old tables: rebuild them too
                            run.wh.mark_built(later.name, None)
        output = stage.output(run)
        run.wh.release_cached_memory()  # what the next stage would not reuse
        return output


# What the evaluate and report stages and `specdraft run`'s output import (0.11 s), imported with
# the policy's slow imports rather than when the run starts
REPORT_IMPORTS = ("specdraft.report.results", "specdraft.report.html")


def import_in_background(modules: tuple[str, ...]) -> None:
    """Start importing `modules` in a daemon thread, so that a stage that needs them later finds
    them loaded; the n-gram tables and candidates spend their time in DuckDB, which releases the
    GIL (ingest does not: its Python took 2-3 s longer beside a 2.3 s import of scikit-learn). An import
    that fails here fails again, with its error, where the stage imports it."""
    import importlib
    import threading

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - reported by the stage's own import
                return

    if modules:
        threading.Thread(target=load, name="slow-imports", daemon=True).start()


def run_until(last: str, cfg: RunConfig, inputs: RunInputs, timer: StageTimer | None = None,
              run_id: str | None = None, leave_one_out: bool = False):
    """Run the stages up to and including `last`, reusing tables already built for the same
    inputs; return that stage's output: the traces path (ingest), the index counters
    (ngram_tables), the candidate counts (candidates), the policy (calibrate), its Evaluation
    (evaluate) or the recorded run's results dict (report).

    engine="spark" builds the stage-4 tables on Spark and loads them into the warehouse; the
    tables equal DuckDB's, so tables already built are reused whichever engine made them.
    """
    if last not in STAGE_NAMES:
        raise SpecdraftError(f"unknown stage {last!r}; stages: {', '.join(STAGE_NAMES)}")
    if inputs.engine not in ENGINES:
        raise SpecdraftError(f"unknown engine {inputs.engine!r}; engines: {', '.join(ENGINES)}")
    with Warehouse(Path(inputs.warehouse), memory_limit=inputs.memory_limit, debug=inputs.debug,
                   dataset=inputs.dataset_name) as wh:
        run = RunState(cfg, inputs, wh, timer or StageTimer(), run_id, leave_one_out)
        for stage in STAGES[: STAGE_NAMES.index(last) + 1]:
            output = _run_stage(stage, run)
            if stage.name == "ingest" and STAGE_NAMES.index(last) >= STAGE_NAMES.index("calibrate"):
                # after ingest, whose tokenizer forks and whose Python would share the GIL with it
                from specdraft.policy import policy_for

                reports = REPORT_IMPORTS if last == "report" else ()
                import_in_background((*policy_for(cfg.preset).slow_imports, *reports))
        return output


def run_all(cfg: RunConfig, warehouse: Path, data: str | list[str] | None = None, dataset: str = DEFAULT_DATASET,
            leave_one_out: bool = False, **inputs) -> dict:
    """Every stage; the results dict (report.results.build_results). Shorthand for
    run_until("report", cfg, RunInputs(warehouse, data, dataset, **inputs))."""
    return run_until("report", cfg, RunInputs(Path(warehouse), data, dataset, **inputs),
                     leave_one_out=leave_one_out)
