"""Reliability: one writer at a time with a clear message, several readers side by side, a kill -9
or Ctrl-C at any point of any command loses nothing, the memory budget is DuckDB's and spills,
hostile names cannot reach SQL.

The kill suite does not guess when to kill: every command that writes is killed (SIGKILL) by a
failpoint (specdraft.failpoints) at each point it passes, inside each stage's transaction before
and after its commit and inside each file write before and after its rename."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.errors import SpecdraftError
from specdraft.sources.synthetic import write_traces_parquet
from specdraft.warehouse import connection, snapshot
from specdraft.warehouse.connection import DB_FILE, Warehouse, size_bytes
from specdraft.warehouse.lock import LOCK_FILE
from specdraft.warehouse.snapshot import SNAPSHOT_FILE

from .conftest import FIXTURES

DATA = str(FIXTURES / "parity_traces.parquet")
SMALL = ["--max-completion-tokens", "160", "--max-index-positions", "5000", "--backoff-max-index-positions", "6000"]
# Smaller still where no parity is checked (the kill suite runs dozens of commands): every stage
# still writes every table.
KILL_FLAGS = ["--preset", "seed", "--max-completion-tokens", "64", "--max-index-positions", "2000",
              "--backoff-max-index-positions", "2000", "--calibration-limit", "4", "--eval-limit", "4"]
SPECDRAFT = [sys.executable, "-m", "specdraft.cli"]
# Holds a warehouse open until its stdin closes: `python -c HOLD ROOT [read_only]`. It answers a
# query first, so "ready" means the connection is open and serving.
HOLD = """
import sys
from specdraft.warehouse.connection import Warehouse
with Warehouse(sys.argv[1], read_only=len(sys.argv) > 2) as wh:
    runs = wh.run_text("select count(*) from main.runs").fetchall()[0][0]
    print("ready", runs, flush=True)
    sys.stdin.read()
"""


def cli(*args, env: dict[str, str] | None = None):
    """A command in this process (CliRunner); `env` sets environment variables meanwhile."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def specdraft(*args, failpoint: str | None = None) -> subprocess.CompletedProcess:
    """A command in its own process, with SPECDRAFT_FAILPOINT=failpoint."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDRAFT_FAILPOINT")}
    if failpoint:
        env["SPECDRAFT_FAILPOINT"] = failpoint
    return subprocess.run([*SPECDRAFT, *map(str, args)], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, check=False)


def holder(root: Path, read_only: bool = False) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(root), *(["ro"] if read_only else [])],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().split()[0] == "ready"
    return process


def test_a_second_writer_gets_a_clear_busy_message_and_readers_the_snapshot(tmp_path, caplog):
    assert cli("run", *KILL_FLAGS, "--data", DATA, "--warehouse", tmp_path, "--out", tmp_path / "out").exit_code == 0
    writer = holder(tmp_path)  # holds the lock until its stdin closes, or it is killed
    try:
        with pytest.raises(SpecdraftError, match=rf"warehouse is busy \(pid {writer.pid}, since "):
            Warehouse(tmp_path)
        with Warehouse(tmp_path, read_only=True) as wh:  # the state the writer last committed
            assert wh.snapshot and wh.run_text("select count(*) from main.runs").fetchall() == [(1,)]
        result = cli("sql", "--warehouse", tmp_path, "--format", "csv", "select count(*) as runs from main.runs")
        assert result.exit_code == 0 and result.stdout.split() == ["runs", "1"]
        assert f"a run is building (pid {writer.pid}, since " in caplog.text  # on stderr, from the CLI
        assert caplog.text.count("a run is building") == 1  # once, not per reader (compare opens five)
        (tmp_path / SNAPSHOT_FILE).unlink()  # a warehouse from before snapshots: busy, as it was
        with pytest.raises(SpecdraftError, match=rf"warehouse is busy \(pid {writer.pid}, since "):
            Warehouse(tmp_path, read_only=True)
    finally:
        writer.kill()
        writer.wait()
    # the lock goes with the process, even on kill -9
    with Warehouse(tmp_path, read_only=True) as wh:
        assert not wh.snapshot and wh.query("report/run_results", {"run_id": ""}).fetchall()


def test_a_reader_whose_writer_ends_between_the_two_looks_reads_the_file(tmp_path, monkeypatch):
    """A reader finds the file held by a writer; before it asks who that is, the writer ends (and
    its last snapshot copy is in). It opens the file again rather than calling the warehouse
    unreadable: the race made certain by ending the writer inside the look."""
    from specdraft.warehouse import lock

    assert cli("run", *KILL_FLAGS, "--data", DATA, "--warehouse", tmp_path, "--out", tmp_path / "out").exit_code == 0
    writer = holder(tmp_path)
    looked = lock.WriterLock.holder

    def end_writer_then_look(at):
        writer.stdin.close()
        writer.wait()
        while looked(at) is not None:  # the writer's last copy for readers, if it made one
            time.sleep(0.01)
        return looked(at)

    monkeypatch.setattr(lock.WriterLock, "holder", staticmethod(end_writer_then_look))
    with Warehouse(tmp_path, read_only=True) as wh:
        assert not wh.snapshot and wh.run_text("select count(*) from main.runs").fetchall() == [(1,)]
    assert writer.returncode == 0


def test_a_lock_let_go_between_the_two_looks_is_taken(tmp_path, monkeypatch):
    """A writer's first try at the lock fails; before it asks who holds it, the holder lets go (a
    last snapshot copy that has just finished). It tries again and takes the lock, rather than
    calling the warehouse busy: the race that failed CI once, made certain here by letting go inside
    the look."""
    import fcntl

    from specdraft.warehouse import lock

    path = tmp_path / LOCK_FILE
    other = open(path, "a+")  # noqa: SIM115 - another open file: flock conflicts within one process too
    fcntl.flock(other, fcntl.LOCK_EX)
    looked = lock.WriterLock.holder

    def let_go_then_look(at):
        other.close()
        return looked(at)

    monkeypatch.setattr(lock.WriterLock, "holder", staticmethod(let_go_then_look))
    taken = lock.WriterLock(path)
    try:
        assert path.read_text().startswith(f"pid {os.getpid()}, since ")
    finally:
        taken.release()


def test_several_readers_side_by_side(tmp_path, monkeypatch):
    """Two processes hold the warehouse open read-only at once (each answered a query and waits on
    its stdin); meanwhile `specdraft sql` answers too, and a writer, having waited for them, is
    refused."""
    monkeypatch.setattr(connection, "READERS_WAIT_S", 0.2)
    assert cli("run", *KILL_FLAGS, "--data", DATA, "--warehouse", tmp_path, "--out", tmp_path / "out").exit_code == 0
    readers = []
    try:
        readers = [holder(tmp_path, read_only=True) for _ in range(2)]
        result = cli("sql", "--warehouse", tmp_path, "--format", "csv", "select count(*) as runs from main.runs")
        assert result.exit_code == 0 and result.stdout.split() == ["runs", "1"]
        with pytest.raises(SpecdraftError, match="warehouse is busy: other processes have held it open"):
            Warehouse(tmp_path)
    finally:
        for reader in readers:
            reader.stdin.close()
    assert [reader.wait() for reader in readers] == [0, 0]


# -- the kill suite ----------------------------------------------------------------------------
#
# Each scenario is a command that writes, run on a warehouse prepared for it ("before"). It passes
# its failpoints in the order listed; the suite kills it at each in turn. Killed at a point, the
# warehouse and output files must read exactly as before, except that each transaction committed
# before the kill leaves the tables as a clean run of its stage leaves them, and each file renamed
# before it is the clean run's file. Then the command runs again to the end, and everything must
# equal a clean run's. test_every_point_a_command_passes_is_in_the_suite keeps these lists complete.

# `run` with other settings on a changed input: it ingests afresh and rebuilds every stage.
RUN_POINTS = (
    "write:parity_traces.parquet:before_rename", "write:parity_traces.parquet:after_rename",
    "transaction:register_dataset:before_commit", "transaction:register_dataset:after_commit",
    "transaction:ngram_tables:before_commit", "transaction:ngram_tables:after_commit",
    "transaction:candidates:before_commit", "transaction:candidates:after_commit",
    "transaction:record_run:before_commit", "transaction:record_run:after_commit",
    "write:results.json:before_rename", "write:results.json:after_rename",
    "write:accepted_histogram.svg:before_rename", "write:accepted_histogram.svg:after_rename",
    "write:report.html:before_rename", "write:report.html:after_rename",
)
APPEND_POINTS = (
    "write:parity_traces.parquet:before_rename", "write:parity_traces.parquet:after_rename",
    "transaction:append:before_commit", "transaction:append:after_commit",
)
REPORT_POINTS = (
    "write:results.json:before_rename", "write:results.json:after_rename",
    "write:accepted_histogram.svg:before_rename", "write:accepted_histogram.svg:after_rename",
    "write:report.html:before_rename", "write:report.html:after_rename",
)
DEMO_TRACES = 40
# the demo writes its sample, then passes a fresh run's points (killed in the `run` scenario)
DEMO_POINTS = (f"write:synthetic_{DEMO_TRACES}_0.parquet:before_rename",
               f"write:synthetic_{DEMO_TRACES}_0.parquet:after_rename")
# The killed run's settings: other tables and other results than before's, so that a step half
# done would show (test_every_step_changes_what_it_writes).
OTHER = ["--max-continuations-per-context", "2", "--draft-len", "12"]
# What differs between two clean runs of one command: left out of the "stable" digests.
# how the run went, not what it measured: a run resumed after a kill reuses what was built before it
VOLATILE_RESULTS = ("run_id", "timings_s", "peak_rss_bytes_by_stage", "reused_stages")
VOLATILE_COLUMNS = ("run_id",)  # and every timestamp column
# Every `run` records a run: rerun after a kill that came after the record, it records another one
# like it. Stable digests of these tables cover their distinct rows: the same runs, once or more.
HISTORY = ("runs", "eval_positions", "run_builds")
# A kill between a traces file's rename and the catalog's commit leaves the new file and the old
# catalog (two stores, one rename): the next run sees that the catalog's latest row is not the
# file's latest version (warehouse/catalog.is_cataloged) and records it as the killed command would
# have, so it too ends as a clean run does.


@dataclass(frozen=True)
class Scenario:
    name: str
    command: tuple[str, ...]  # after `specdraft`; {wh}, {out}, {input}, {more} are filled in
    points: tuple[str, ...]
    # a transaction's name -> the command whose clean run ends with that transaction committed
    stages: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # what runs to the end after a kill (default: the command again); a command may fail with
    # `done` in its message when the kill came after its work
    resume: tuple[tuple[tuple[str, ...], str | None], ...] = ()


def _run(*extra: str) -> tuple[str, ...]:
    return ("run", *KILL_FLAGS, *extra, "--warehouse", "{wh}", "--out", "{out}")


def _stage(command: str) -> tuple[str, ...]:
    return (command, *KILL_FLAGS, *OTHER, "--data", "{input}", "--warehouse", "{wh}")


APPEND = ("ingest", "--append", "--data", "{more}", "--name", "parity_traces", "--warehouse", "{wh}")
SCENARIOS = {
    "run": Scenario("run", _run(*OTHER, "--data", "{input}"), RUN_POINTS,
                    stages=(("register_dataset", _stage("ingest")), ("ngram_tables", _stage("build")),
                            ("candidates", _stage("candidates")))),
    "append": Scenario("append", APPEND, APPEND_POINTS,
                       resume=((APPEND, "already in dataset"), (_run("--name", "parity_traces"), None))),
    "report": Scenario("report", ("report", "--warehouse", "{wh}", "--out", "{out}"), REPORT_POINTS),
    "demo": Scenario("demo", ("demo", "--traces", str(DEMO_TRACES), *KILL_FLAGS, "--warehouse", "{wh}",
                              "--out", "{out}"), DEMO_POINTS),
}
CASES = [(scenario, point) for scenario in SCENARIOS.values() for point in scenario.points]


def stage_of(point: str) -> str:
    """The pipeline stage a failpoint belongs to, for the kill report."""
    kind, name, _ = point.split(":")
    if kind == "transaction":
        return {"register_dataset": "ingest", "append": "ingest --append"}.get(name, name)
    if name.startswith("synthetic_"):
        return "demo sample"
    return "ingest" if name.endswith(".parquet") else "report"


def volatile_tokens(base: Path) -> list[str]:
    """Strings that differ between two clean runs: each append's random version and time (in the
    traces file and the catalog), and the demo sample's modification time (in the input's
    signature, which build keys and the catalog carry)."""
    tokens = []
    for path in sorted((base / "wh" / "traces").glob("*.parquet")):
        meta = json.loads((pq.read_schema(path).metadata or {}).get(b"specdraft", b"{}"))
        tokens += [str(a[key]) for a in meta.get("appends", []) for key in ("version", "appended_at")]
    tokens += [str(p.stat().st_mtime_ns) for p in sorted((base / "wh" / "samples").glob("*.parquet"))]
    return tokens


def _stable_select(con, schema: str, table: str, tokens: list[str]) -> str:
    """The table's rows without volatile columns (timestamps, run ids) and strings (tokens)."""
    items = []
    for name, kind in con.execute("select column_name, data_type from duckdb_columns() where schema_name = ? "
                                  "and table_name = ? order by column_index", [schema, table]).fetchall():
        if name in VOLATILE_COLUMNS or kind.startswith("TIMESTAMP"):
            continue
        expression = f'"{name}"'
        if table == "runs" and name == "results":
            expression = f"json_merge_patch(results, '{json.dumps(dict.fromkeys(VOLATILE_RESULTS))}')"
        for token in tokens if kind in ("VARCHAR", "JSON") else ():
            expression = f"replace({expression}::varchar, '{token}', '<volatile>')"
        items.append(f'{expression} as "{name}"')
    distinct = "distinct " if table in HISTORY else ""
    return f'select {distinct}{", ".join(items)} from "{schema}"."{table}"'


def _tables(db: Path, tokens: list[str]) -> dict[str, tuple]:
    """Every table of every schema: (rows, the sum of each whole row's hash) exactly and stably;
    every view's and macro's definition."""
    if not db.exists():
        return {}
    out: dict[str, tuple] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for schema, table in con.execute("select schema_name, table_name from duckdb_tables() "
                                         "where not internal order by all").fetchall():
            exact = con.execute(f'select count(*), sum(hash(t)) from "{schema}"."{table}" as t').fetchall()[0]
            stable = con.execute(f"select count(*), sum(hash(s)) from ({_stable_select(con, schema, table, tokens)}) "
                                 "as s").fetchall()[0]
            out[f"{schema}.{table}"] = (exact, stable)
        definitions = con.execute(
            "select schema_name || '.' || view_name || ' (view)', sql from duckdb_views() where not internal "
            "union all select schema_name || '.' || function_name || ' (macro)', macro_definition "
            "from duckdb_functions() where not internal and function_type like '%macro%' order by all").fetchall()
    return out | {name: (sql, sql) for name, sql in definitions}


def _file_digests(path: Path, tokens: list[str]) -> tuple[str, str]:
    """sha256 of the file, exactly and stably (results.json without timings and run id; report.html
    with its run ids blanked; Parquet as its rows and its metadata without volatile strings)."""
    data = path.read_bytes()
    stable = data
    if path.name == "report.html":
        stable = re.sub(rb"\d{8}T\d{6}Z-[0-9a-f]{6}", b"<run id>", data)
    elif path.name == "results.json":
        results = json.loads(data)
        stable = json.dumps({k: v for k, v in results.items() if k not in VOLATILE_RESULTS}, sort_keys=True).encode()
    elif path.suffix == ".parquet":
        table = pq.read_table(path)
        metadata = repr(table.schema.metadata)
        for token in tokens:
            metadata = metadata.replace(token, "<volatile>")
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema.remove_metadata()) as writer:
            writer.write_table(table.replace_schema_metadata(None).combine_chunks())
        stable = sink.getvalue().to_pybytes() + metadata.encode()
    return hashlib.sha256(data).hexdigest(), hashlib.sha256(stable).hexdigest()


@dataclass
class State:
    """Everything a command can change under a base directory (its warehouse `wh` and output
    `out`): every table, view and macro (see _tables) and every file, except DuckDB's own files and
    its spill space, each as (exact digest, stable digest); stable digests leave out what differs
    between two clean runs (timestamps, run ids, timings, volatile_tokens). Partial files (a write
    killed before its rename) are listed apart."""

    tables: dict[str, tuple]
    files: dict[str, tuple]
    partials: list[str]

    @classmethod
    def of(cls, base: Path) -> State:
        tokens = volatile_tokens(base)
        files, partials = {}, []
        for path in sorted(p for d in ("wh", "out") if (base / d).exists() for p in (base / d).rglob("*")):
            relative = str(path.relative_to(base))
            if path.is_dir() or relative.startswith("wh/tmp/") or path.name in (DB_FILE, f"{DB_FILE}.wal", LOCK_FILE, SNAPSHOT_FILE):
                continue
            if path.name.startswith(f".{SNAPSHOT_FILE}."):  # a copy for readers, perhaps still being made
                continue
            if path.name.endswith(".partial"):
                partials.append(relative)
            else:
                files[relative] = _file_digests(path, tokens)
        return cls(_tables(base / "wh" / DB_FILE, tokens), files, partials)

    def stable(self) -> tuple[dict, dict]:
        return ({name: digests[1] for name, digests in self.tables.items()},
                {name: digests[1] for name, digests in self.files.items()})


# The child processes of the Ctrl-C tests take SIGINT as KeyboardInterrupt whatever they inherit: a
# shell starts a background job (`./.ci/run &`) with SIGINT ignored, which its children inherit and
# Python keeps, and the tests' runs then went on to their end.
SIGINT_AS_PYTHON_DOES = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
CLI_WITH_SIGINT = SIGINT_AS_PYTHON_DOES + "import runpy; runpy.run_module('specdraft.cli', run_name='__main__', alter_sys=True)"


# Forks `specdraft` commands from one process that has imported specdraft and pandas and loaded the
# tokenizer and its fingerprint (about two seconds apiece otherwise): each request line is JSON
# [args, env, stderr file]; the answer is the child's exit code (-9 when SIGKILL ended it). The
# child runs specdraft's own CLI, as a process. Nothing here starts a thread before the forks.
ZYGOTE = SIGINT_AS_PYTHON_DOES + """
import json, os, sys
import pandas
from specdraft.cli import main
from specdraft.policy import seed as calibrate
from specdraft.drafters import candidates
from specdraft.policy import evaluate
from specdraft.sources import ingest
from specdraft.tables import ngrams
from specdraft import pipeline
from specdraft.report import results as report
from specdraft.sources import tokenizer
tokenizer.load_tokenizer().fingerprint
for line in sys.stdin:
    args, env, stderr = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.environ.update(env)
        os.dup2(os.open(os.devnull, os.O_RDWR), 0)
        os.dup2(os.open(os.devnull, os.O_RDWR), 1)
        os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        try:
            main(args)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class KillSuite:
    """One directory `base` (so that the paths the warehouse stores are the same in every case):
    a pristine copy of each scenario's "before", the states of its clean runs, and the kill report."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.report: list[list[str]] = []
        self.before: dict[str, State] = {}
        self.clean: dict[str, dict[str, State]] = {}  # scenario -> transaction, "complete", "resumed"
        self.recorded: dict[str, list[str]] = {}
        self.zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)

    def run_with(self, scenario: Scenario, failpoint: str) -> tuple[int, str]:
        """The scenario's command in its own process, with SPECDRAFT_FAILPOINT=failpoint: its exit
        code and stderr."""
        stderr = self.base / "stderr"
        request = [self.args(scenario.command), {"SPECDRAFT_FAILPOINT": failpoint}, str(stderr)]
        self.zygote.stdin.write(json.dumps(request) + "\n")
        self.zygote.stdin.flush()
        return int(self.zygote.stdout.readline()), stderr.read_text()

    def close(self) -> None:
        self.zygote.stdin.close()
        self.zygote.wait()

    def args(self, command: tuple[str, ...]) -> list[str]:
        paths = {"wh": self.base / "wh", "out": self.base / "out", "input": self.base / "input" / "parity_traces.parquet",
                 "more": self.base / "input" / "more.parquet"}
        return [part.format(**paths) for part in command]

    def save(self, scenario: str, out_from: str | None = None) -> None:
        """The present warehouse (and output, or `out_from`'s pristine output) as `scenario`'s before."""
        # the last command's copy for readers may outlive it (snapshot.Copy): copied while it runs,
        # its partial file is renamed away under copytree
        snapshot.Copy.wait_for_pending()
        pristine = self.base / "pristine" / scenario
        shutil.copytree(self.base / "wh", pristine / "wh")
        shutil.copytree(self.base / "pristine" / out_from / "out" if out_from else self.base / "out", pristine / "out")

    def restore(self, scenario: str) -> None:
        snapshot.Copy.wait_for_pending()  # (a copy still running would rename its file into the restored warehouse)
        for d in ("wh", "out"):
            shutil.rmtree(self.base / d, ignore_errors=True)
            shutil.copytree(self.base / "pristine" / scenario / d, self.base / d)

    def prepare(self, scenario: Scenario) -> None:
        """The scenario's before, and its clean runs: each stage's command, the whole command
        (recording the points it passes) and what a resume runs after it."""
        self.restore(scenario.name)
        self.before[scenario.name] = State.of(self.base)
        self.clean[scenario.name] = {}
        for transaction, command in scenario.stages:
            assert cli(*self.args(command)).exit_code == 0
            self.clean[scenario.name][transaction] = State.of(self.base)
        self.restore(scenario.name)
        log = self.base / f"{scenario.name}.points"
        result = cli(*self.args(scenario.command),
                     env={"SPECDRAFT_FAILPOINT": "*=record", "SPECDRAFT_FAILPOINT_LOG": str(log)})
        assert result.exit_code == 0, result.stderr
        self.recorded[scenario.name] = [line.split()[1] for line in log.read_text().splitlines()]
        self.clean[scenario.name]["complete"] = State.of(self.base)
        if scenario.resume:
            self.resume(scenario)
        self.clean[scenario.name]["resumed"] = State.of(self.base)

    def resume(self, scenario: Scenario) -> None:
        """Run a scenario's command again, to the end (what a user does after a kill)."""
        for command, done in scenario.resume or ((scenario.command, None),):
            result = cli(*self.args(command))
            assert result.exit_code == 0 or (done and done in result.stderr), result.stderr


@pytest.fixture(scope="module")
def suite(tmp_path_factory, request):
    """Builds each scenario's before: a first run (default settings) for `run` and `append`, whose
    input then changes (its modification time: a changed input is ingested afresh); the `run`
    scenario's clean result for `report`, with the first run's output; nothing for `demo`. Prints
    the kill report when the module ends."""
    suite = KillSuite(tmp_path_factory.mktemp("kills"))
    base = suite.base
    (base / "input").mkdir()
    data = base / "input" / "parity_traces.parquet"
    shutil.copy(DATA, data)
    os.utime(data, ns=(1_700_000_000_000_000_000,) * 2)
    write_traces_parquet(base / "input" / "more.parquet", n_traces=8, seed=11)
    assert cli(*suite.args(_run("--data", "{input}"))).exit_code == 0
    os.utime(data, ns=(1_700_000_100_000_000_000,) * 2)
    suite.save("run")
    suite.save("append")
    suite.prepare(SCENARIOS["run"])
    suite.prepare(SCENARIOS["append"])
    suite.restore("run")
    assert cli(*suite.args(SCENARIOS["run"].command)).exit_code == 0
    suite.save("report", out_from="run")
    suite.prepare(SCENARIOS["report"])
    for d in ("wh", "out"):
        (base / "pristine" / "demo" / d).mkdir(parents=True)
    suite.prepare(SCENARIOS["demo"])
    yield suite
    suite.close()
    _print_report(request, suite.report)


def _print_report(request, rows: list[list[str]]) -> None:
    """The kill report on the terminal (past pytest's capture): one row per kill point."""
    if not rows:
        return
    killed = sum(row[3] == "yes" for row in rows)
    header = ("kill report: scenario | stage | point | killed by SIGKILL | tables, views, macros and files "
              "compared | after a rerun, equal to a clean run")
    lines = ["", header, *("  " + " | ".join(row) for row in rows), f"  {len(rows)} kill points, {killed} killed by SIGKILL"]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        for line in lines:
            reporter.write_line(line)


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS)
def test_every_point_a_command_passes_is_in_the_suite(suite, scenario):
    """A clean run records the failpoints it passes (`*=record`): they must be the scenario's list,
    so a new stage's transaction or a new file cannot escape the kill suite."""
    recorded = suite.recorded[scenario.name]
    if scenario.name == "demo":
        assert recorded[2:] == [p.replace("parity_traces", "synthetic") for p in RUN_POINTS]
        recorded = recorded[:2]
    assert tuple(recorded) == scenario.points


def test_every_transaction_in_the_code_is_killed_by_the_suite():
    """Every `transaction("<name>")` in specdraft/, and every kept stage's transaction (the
    pipeline opens one per kept stage, named after it), is a kill point of some scenario."""
    from specdraft import pipeline

    source = "".join(p.read_text() for p in (Path(__file__).parents[1] / "specdraft").rglob("*.py"))
    names = set(re.findall(r"\.transaction\(\"(\w+)\"\)", source))
    assert names and not re.search(r"\.transaction\(\)", source)
    assert re.search(r"\.transaction\(stage\.name\)", source)
    names |= {stage.name for stage in pipeline.STAGES if stage.kept}
    killed = {point.split(":")[1] for _, point in CASES if point.startswith("transaction:")}
    assert names == killed


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS)
def test_every_step_changes_what_it_writes(suite, scenario):
    """A kill can only show a step half done if the step changes something: each file renamed
    differs from before, and each transaction's commit changes the tables."""
    tables, files = suite.before[scenario.name].stable()
    clean = suite.clean[scenario.name]
    complete_files = clean["complete"].stable()[1]
    for point in scenario.points:
        _, name, when = point.split(":")
        if when == "after_rename":
            [path] = [path for path in complete_files if Path(path).name == name]
            assert files.get(path) != complete_files[path], point
        elif when == "after_commit":
            committed = (clean.get(name) or clean["complete"]).stable()[0]
            assert committed != tables, point
            tables = committed


def assert_state_at(suite: KillSuite, scenario: Scenario, point: str, after: State) -> list[str]:
    """The state of a command stopped at `point`: the tables exactly as before if no transaction
    had committed, else as the clean run of the last one's stage left them; each file renamed by
    then as the clean run's, every other file exactly as before. Returns the files compared."""
    before, clean = suite.before[scenario.name], suite.clean[scenario.name]
    passed = scenario.points[: scenario.points.index(point) + 1]
    committed = [p.split(":")[1] for p in passed if p.startswith("transaction:") and p.endswith(":after_commit")]
    renamed = {p.split(":")[1] for p in passed if p.startswith("write:") and p.endswith(":after_rename")}
    if not committed:
        assert after.tables == before.tables
    else:
        assert after.stable()[0] == (clean.get(committed[-1]) or clean["complete"]).stable()[0]
    names = sorted(set(before.files) | set(clean["complete"].files))
    for name in names:
        if Path(name).name in renamed:
            assert after.stable()[1].get(name) == clean["complete"].stable()[1].get(name), name
        else:
            assert after.files.get(name) == before.files.get(name), name
    return names


@pytest.mark.parametrize("scenario, point", CASES, ids=[f"{s.name}-{p}" for s, p in CASES])
def test_kill_9_at_every_point_loses_nothing(suite, scenario, point):
    suite.restore(scenario.name)
    clean = suite.clean[scenario.name]
    code, stderr = suite.run_with(scenario, f"{point}=kill")
    row = [scenario.name, stage_of(point), point, "yes" if code == -signal.SIGKILL else f"no (exit {code})"]
    suite.report.append(row)
    assert code == -signal.SIGKILL, stderr  # a point never reached lets the command finish

    after = State.of(suite.base)
    names = assert_state_at(suite, scenario, point, after)
    row.append(f"{len(after.tables)} tables, {len(names)} files")

    suite.resume(scenario)
    resumed = State.of(suite.base)
    tables, files = resumed.stable()
    clean_tables, clean_files = clean["resumed"].stable()
    assert files == clean_files
    assert not resumed.partials
    assert tables == clean_tables
    row.append("yes")


def test_ctrl_c_mid_stage_rolls_back(suite):
    """SIGINT (what Ctrl-C sends) inside the n-gram stage's transaction: exit code 130, one line,
    and the warehouse as before the stage (as a kill there leaves it), and the rerun completes."""
    scenario, point = SCENARIOS["run"], "transaction:ngram_tables:before_commit"
    suite.restore(scenario.name)
    code, stderr = suite.run_with(scenario, f"{point}=interrupt")
    assert (code, stderr) == (130, "specdraft: interrupted\n")
    assert_state_at(suite, scenario, point, State.of(suite.base))
    suite.resume(scenario)
    assert State.of(suite.base).stable() == suite.clean[scenario.name]["resumed"].stable()


def test_memory_limit_is_duckdbs_share_and_spills_to_the_warehouse(tmp_path):
    with Warehouse(tmp_path, memory_limit="1GB") as wh:
        setting, temp = wh.run_text(
            "select current_setting('memory_limit'), current_setting('temp_directory')").fetchall()[0]
    # DuckDB shows the limit in MiB, cut to one decimal
    assert abs(size_bytes(setting) - 0.7 * 1000**3) < 0.1 * 1024**2
    assert temp == str(tmp_path / "tmp")


def _duckdb_bytes(wh: Warehouse) -> int:
    return wh.run_text("select sum(memory_usage_bytes) from duckdb_memory()").fetchall()[0][0]


def test_releasing_the_cache_evicts_table_blocks_and_keeps_the_limit(tmp_path, monkeypatch):
    """release_cached_memory evicts the blocks DuckDB caches after a statement (here a 16 MB table
    of random numbers it wrote and then read) and leaves temp tables in memory; the memory limit
    is what it was. uncached() does it after each materialize or store once the cache is over
    CACHE_ALLOWANCE, and only inside its block."""
    from specdraft.warehouse import connection

    monkeypatch.setattr(connection, "CACHE_ALLOWANCE", 12 * 1024**2)
    with Warehouse(tmp_path, memory_limit="1GB") as wh:
        limit = wh.run_text("select current_setting('memory_limit')").fetchall()[0][0]
        rng = np.random.default_rng(0)
        numbers = pa.table({"n": rng.integers(0, 2**62, 2_000_000)})  # incompressible: 16 MB
        few = pa.table({"n": rng.integers(0, 2**62, 1_000_000)})  # 8 MB

        def cache(table):
            wh.store("numbers", table)
            wh.run_text("select sum(n) from numbers").fetchall()
            return _duckdb_bytes(wh)

        assert cache(numbers) > 14 * 1024**2
        wh.release_cached_memory()
        assert _duckdb_bytes(wh) < 2 * 1024**2
        assert wh.run_text("select current_setting('memory_limit')").fetchall()[0][0] == limit
        assert cache(numbers) > 14 * 1024**2  # outside uncached(): kept
        wh.run_text("create temp table kept as select * from numbers")  # a build intermediate
        wh.release_cached_memory()
        in_memory = wh.run_text("select memory_usage_bytes from duckdb_memory() where tag = 'IN_MEMORY_TABLE'")
        assert in_memory.fetchall()[0][0] > 14 * 1024**2  # temp tables stay: evicting them would spill
        assert not list((tmp_path / "tmp").glob("*"))
        wh.drop("kept")
        with wh.uncached():
            wh.store("numbers", few)
            assert 6 * 1024**2 < _duckdb_bytes(wh) < 12 * 1024**2  # within the allowance: kept
            wh.store("numbers", numbers)
            assert _duckdb_bytes(wh) < 2 * 1024**2
        assert wh.run_text("select count(*) from numbers").fetchall()[0][0] == 2_000_000


def test_spilled_tables_are_read_from_a_file_that_goes_with_them(tmp_path):
    """store_spilled: the parts read back whole, in order, under the table's name; drop deletes the
    file, close deletes one a failed build left, and the next writer deletes one a killed writer
    left; no parts is an error, not an empty view."""
    spilled = tmp_path / "tmp" / f"numbers{connection.SPILL_SUFFIX}"
    parts = [pa.table({"n": np.arange(start, start + 5, dtype=np.int64), "key": pa.array([1, None, 3, 4, 5])})
             for start in (0, 5, 10)]
    with Warehouse(tmp_path, memory_limit="1GB") as wh:
        wh.store_spilled("numbers", iter(parts))
        assert spilled.exists()
        assert wh.run_text("select * from numbers").to_arrow_table().equals(pa.concat_tables(parts))
        wh.drop("numbers")
        assert not spilled.exists() and not wh.has_table("numbers")
        wh.store_spilled("numbers", iter(parts[:1]))
    assert not spilled.exists()  # closed without a drop
    with pytest.raises(SpecdraftError, match="no parts"), Warehouse(tmp_path, memory_limit="1GB") as wh:
        wh.store_spilled("numbers", iter([]))
    # a part the file cannot take fails the call (the writing thread's error), and the file goes
    with pytest.raises(ValueError, match="schema"), Warehouse(tmp_path, memory_limit="1GB") as wh:
        wh.store_spilled("numbers", iter([parts[0], pa.table({"other": [1]}), parts[1]]))
    assert not spilled.exists()
    spilled.write_bytes(b"left by a killed writer")
    with Warehouse(tmp_path, read_only=True) as reader:
        assert spilled.exists()  # a reader leaves the writer's files alone, and spills elsewhere
        reader.store_spilled("numbers", iter(parts))
        assert reader.run_text("select count(*) from numbers").fetchall() == [(15,)]
        own = reader._spilled["numbers"]
        assert own.parent != spilled.parent and spilled.read_bytes() == b"left by a killed writer"
    assert not own.parent.exists()
    with Warehouse(tmp_path, memory_limit="1GB"):
        assert not spilled.exists()


def test_outside_transaction_reads_committed_tables_and_lets_registered_tables_go(tmp_path):
    """Inside a transaction DuckDB keeps every registered Arrow table alive until it ends; the
    second connection of outside_transaction() reads the committed tables (of the dataset's
    schema), not the transaction's own, and holds no table it was given once its statement is done."""
    import gc
    import tracemalloc

    def traced() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    with Warehouse(tmp_path, dataset="numbers_set") as wh:
        wh.store("committed", pa.table({"k": np.arange(10, dtype=np.int64)}))
        wh.run_text("begin transaction")
        wh.store("uncommitted", pa.table({"k": np.arange(3, dtype=np.int64)}))
        tracemalloc.start()
        try:
            for use, kept in ((wh, True), (None, False)):
                before = traced()
                with wh.outside_transaction() if use is None else nullcontext(wh) as reader:
                    for _ in range(3):  # 3 x 40 MB
                        reader.register("probes", pa.table({"k": np.arange(5_000_000, dtype=np.int64)}))
                        hits = reader.run_text("select count(*) from probes join committed using (k)").fetchall()
                        assert hits == [(10,)]
                grew = traced() - before
                assert (grew > 100 * 1024**2) == kept, grew
        finally:
            tracemalloc.stop()
        with wh.outside_transaction() as reader, pytest.raises(SpecdraftError, match="uncommitted"):
            reader.run_text("select * from uncommitted").fetchall()
        wh.run_text("rollback")


def test_scanned_and_stored_tables_go_when_their_statement_is_done_inside_a_transaction(tmp_path):
    """Warehouse.scanning and store hand Arrow tables to statements inside the stage's transaction
    without DuckDB keeping them until it ends, as it keeps a registered one (the control): three
    56 MB tables in turn leave less than one of them behind, and every row was read."""
    import gc
    import tracemalloc

    def traced() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    def keys(i: int) -> pa.Table:  # position_keys as length_keys.sql reads it, 1M rows
        names = ("trace_id", "pos", "token_id", "continuation_hash", "exact_order", "backoff_order", "key_1")
        return pa.table({name: np.arange(1_000_000, dtype=np.int64) + i for name in names})

    def registered(wh, i):
        wh.register("position_keys", keys(i))
        wh.materialize("tables/length_keys", {"ctx_len": 1}, into="registered", append=i > 0)

    def scanned(wh, i):
        with wh.scanning(position_keys=keys(i)):
            wh.materialize("tables/length_keys", {"ctx_len": 1}, view=True)
            wh.materialize("tables/length_keys", {"ctx_len": 1}, into="scanned", append=i > 0)

    def stored(wh, i):
        wh.store("stored", keys(i), append=i > 0)

    with Warehouse(tmp_path, dataset="numbers_set") as wh:
        wh.run_text("begin transaction")
        tracemalloc.start()
        try:
            # each writes the table named after it; length_keys.sql names key_1 ctx_hash
            for use, kept, key in ((registered, True, "ctx_hash"), (scanned, False, "ctx_hash"), (stored, False, "key_1")):
                before = traced()
                for i in range(3):
                    use(wh, i)
                grew = traced() - before
                assert (grew > 56 * 1024**2) == kept, (use.__name__, grew)
                rows = wh.run_text(f"select count(*), max({key}) from {use.__name__}").fetchall()
                assert rows == [(3_000_000, 1_000_001)], use.__name__
        finally:
            tracemalloc.stop()
        wh.run_text("rollback")


# Budgets that make the fixture's candidates stage spill, likeliest first. Measured on the fixture
# with 2 threads (2026-12-07, since the candidates read token_windows): 28 and 29MB spill, 30MB
# does not, 26MB runs out of memory (in ngram_candidates.sql). Before, slicing each trace's token
# list per position, 33 and 34MB spilled, 35MB did not and 32MB ran out. The edges move with the
# threads' timing, so the test tries the budgets around them in turn.
SPILL_BUDGETS = ("28MB", "29MB", "28MB", "29MB", "28MB")


def _run_paused_at_candidates(args: list, budget: str, root: Path, out: Path) -> tuple[int, str, list[str]]:
    """`run` at `budget`, paused before the candidates commit: its exit code, its first line on
    stderr (the pause's) and DuckDB's temporary files in <warehouse>/tmp at the pause."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDRAFT_FAILPOINT")}
    env["SPECDRAFT_FAILPOINT"] = "transaction:candidates:before_commit=pause"
    process = subprocess.Popen([*SPECDRAFT, "run", *args, "--memory-limit", budget, "--warehouse", root, "--out", out],
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    try:
        line = process.stderr.readline()
        spilled = sorted(p.name for p in (root / "tmp").glob("duckdb_temp*")) if (root / "tmp").exists() else []
        process.stdin.close()
        process.wait()
    finally:
        process.kill()
        process.wait()
    return process.returncode, line, spilled


def test_a_tiny_memory_budget_spills_and_gives_the_same_results(tmp_path):
    """A budget of about 28MB (DuckDB gets 70% of it) makes the candidates stage spill to
    <warehouse>/tmp: the run, paused there, shows DuckDB's temporary files, and ends with the
    results of a run with the default budget (SPILL_BUDGETS: the first that spills)."""
    args = ["--data", DATA, "--preset", "seed", *SMALL]
    assert cli("run", *args, "--warehouse", tmp_path / "big", "--out", tmp_path / "big_out").exit_code == 0
    big = json.loads((tmp_path / "big_out" / "results.json").read_text())
    outcomes = {}
    for attempt, budget in enumerate(SPILL_BUDGETS):  # each attempt in a fresh warehouse
        out = tmp_path / f"out_{attempt}_{budget}"
        code, line, spilled = _run_paused_at_candidates(args, budget, tmp_path / f"wh_{attempt}_{budget}", out)
        outcomes[f"{budget} (attempt {attempt + 1})"] = (code, line.strip(), spilled)
        if code == 0 and any(name.endswith(".tmp") for name in spilled):
            assert line == "failpoint transaction:candidates:before_commit reached\n"
            small = json.loads((out / "results.json").read_text())
            for key in ("selected", "oracle_best", "decode_step", "per_source"):
                assert small[key] == big[key]
            assert small["config"] == big["config"]
            return
    pytest.fail(f"no budget spilled and finished (exit code, first line, temporary files): {outcomes}")


@pytest.mark.parametrize("name", ['x"; drop table main.runs; --', "1abc", "a b", "a" * 80, "naïve"])
def test_hostile_dataset_names_are_refused(tmp_path, name):
    result = cli("run", "--name", name, "--data", DATA, "--warehouse", str(tmp_path), *SMALL)
    assert result.exit_code == 1
    assert "invalid identifier" in result.stderr and result.stderr.count("\n") == 1


def test_hostile_column_names_are_only_missing_columns(tmp_path):
    result = cli("run", "--problem-column", "problem\"; drop table x; --", "--data", DATA,
                 "--warehouse", str(tmp_path), *SMALL)
    assert result.exit_code == 1 and "missing column" in result.stderr


def test_a_million_token_trace(tmp_path):
    """A 2.4M-token response: tokenized, stored whole, cut to --max-completion-tokens when tables
    are built (as the seed cuts it)."""
    import pyarrow.parquet as pq

    from .helpers import write_text_traces

    rows = [("train", f"What is {i} plus {i}?", f"<think>\n{i} + {i} = {2 * i}.\n</think> {2 * i}") for i in range(30)]
    rows += [("calibration", "What is 3 plus 4?", "<think>\n3 + 4 = 7.\n</think> 7"),
             ("eval", "Count up.", " ".join(f"{i % 1000} +" for i in range(500_000)))]
    data = write_text_traces(tmp_path / "big.parquet", rows)
    result = cli("run", "--preset", "seed", "--data", str(data), "--warehouse", str(tmp_path / "wh"),
                 "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.stderr
    stored = pq.read_table(tmp_path / "wh" / "traces" / "big.parquet").column("completion_tokens").to_pylist()
    assert max(map(len, stored)) > 1_000_000
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["selected"]["positions"] == 512


def test_a_long_uncapped_eval_trace_runs_in_a_small_memory_limit(tmp_path):
    """One eval trace of about 22,000 tokens, uncut (--max-completion-tokens 0), at --memory-limit
    1GB. Reading each position's next tokens, and each copy's, by slicing the trace's token list
    per row of a join carried the whole list into every row: quadratic in the trace's length. Here
    that ran out of memory in candidates.sql (and a 50,000-token trace took the candidates stage
    32 s and its report 37 s); through token_windows.sql it runs. The report's contexts view
    (top_hitting_contexts, gathered token by token now) is checked against slices of the trace."""
    import random

    from specdraft.warehouse.connection import Warehouse

    from .helpers import write_text_traces

    words = random.Random(1)
    vocabulary = ["".join(words.choice("abcdefghij") for _ in range(5)) for _ in range(2000)]
    rows = [("train", f"What is {i} plus {i}?", f"<think>\n{i} + {i} = {2 * i}.\n</think> {2 * i}") for i in range(30)]
    rows += [("calibration", f"What is {i} plus 4?", f"<think>\n{i} + 4 = {i + 4}.\n</think> {i + 4}") for i in range(3)]
    rows += [("eval", "Write words.", " ".join(words.choice(vocabulary) for _ in range(8000))),
             ("eval", "What is 3 plus 4?", "<think>\n3 + 4 = 7.\n</think> 7")]
    data = write_text_traces(tmp_path / "long.parquet", rows)
    result = cli("run", "--data", str(data), "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "out"),
                 "--max-completion-tokens", "0", "--memory-limit", "1GB")
    assert result.exit_code == 0, result.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["selected"]["positions"] > 20_000
    with Warehouse(tmp_path / "wh", read_only=True, dataset="long", memory_limit=None) as wh:
        viewed = sorted(wh.run_text("select source, ctx_len, ctx_tokens, chosen, hits from top_hitting_contexts "
                                    "where run_id = ?", [results["run_id"]]).fetchall())
        sliced = sorted(wh.run_text("""
            select e.source, e.ctx_len, t.tokens[e.pos - e.ctx_len + 1:e.pos] as ctx_tokens, count(*),
                count(*) filter (where e.accepted > 0)
            from eval_positions as e join selected_traces as t using (trace_id)
            where e.run_id = ? and e.ctx_len > 0
            group by all""", [results["run_id"]]).fetchall())
    assert viewed == sliced and len(viewed) > 1000


@pytest.mark.parametrize("flags, named", [
    (["--draft-len", "0"], "--draft-len"),
    (["--max-index-positions", "-1"], "--max-index-positions"),
    (["--backoff-max-index-positions", "-5"], "--backoff-max-index-positions"),
    (["--context-lengths", "1,abc"], "context lengths"),
    (["--context-lengths", "0,4"], "--context-lengths"),
    (["--backoff-context-lengths", "5000"], "--backoff-context-lengths"),
    (["--eval-limit", "-2"], "--eval-limit"),
    (["--max-continuations-per-context", "-1"], "--max-continuations-per-context"),
])
def test_flags_out_of_range_are_one_line(tmp_path, flags, named):
    result = cli("run", *flags, "--data", DATA, "--warehouse", str(tmp_path))
    assert result.exit_code == 1
    assert named in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "specdraft.duckdb").exists()  # nothing written


def test_an_unknown_preset_is_named_in_a_recorded_config():
    """A config not made by the CLI (a recorded run's, a bundle's, the Python API's) with an unknown
    preset is refused for its preset, not for the settings whose defaults come from the preset."""
    from specdraft.config import RunConfig

    with pytest.raises(SpecdraftError, match="--preset must be one of"):
        RunConfig.recorded({"preset": "fastest"})


def test_an_old_directory_moved_aside_by_a_killed_writer_is_put_back(tmp_path):
    """atomic_dir replaces a directory with two renames: the old one aside, the new one in. Killed
    between them, nothing was at the path, and the next writer's partial_path deleted the old copy
    as a stale partial: a bundle was lost to a kill. It is now put back (then replaced as usual)."""
    from specdraft.files import atomic_dir, partial_path

    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # its pid, once it has ended, runs nothing
    dead.wait()
    bundle = tmp_path / "bundle"
    aside = tmp_path / f".bundle.{dead.pid}.old.partial"  # what the killed writer left
    aside.mkdir()
    (aside / "manifest.json").write_text("old")
    partial_path(bundle)
    assert (bundle / "manifest.json").read_text() == "old" and not aside.exists()
    with atomic_dir(bundle) as new:
        (new / "manifest.json").write_text("new")
    assert (bundle / "manifest.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_ctrl_c_while_a_changed_input_is_ingested_afresh_keeps_the_stored_dataset(tmp_path):
    """Ingest writes the traces file in a thread while the catalog takes the vocabulary, and renames
    it into place on its main thread just before the catalog commits. SIGINT there (the failpoint at
    that rename) exits 130 and leaves the stored file (with its append), the catalog and no
    temporary file: the writer's thread never sees a Ctrl-C, so a rename of its own would have
    replaced the dataset behind the rolled-back catalog."""
    first, more = tmp_path / "s.parquet", tmp_path / "more.parquet"
    write_traces_parquet(first, n_traces=60, seed=1)
    write_traces_parquet(more, n_traces=8, seed=2)
    warehouse = tmp_path / "wh"

    def ingest(*args: str, failpoint: str | None = None) -> subprocess.CompletedProcess:
        env = {name: value for name, value in os.environ.items() if name != "SPECDRAFT_FAILPOINT"}
        if failpoint:
            env["SPECDRAFT_FAILPOINT"] = failpoint
        return subprocess.run([sys.executable, "-c", CLI_WITH_SIGINT, "ingest", "--warehouse", str(warehouse), *args],
                              capture_output=True, text=True, env=env, check=False)

    assert ingest("--data", str(first)).returncode == 0
    assert ingest("--append", "--data", str(more), "--name", "s").returncode == 0
    stored = warehouse / "traces" / "s.parquet"
    before = stored.read_bytes()
    with Warehouse(warehouse, read_only=True) as wh:
        catalog = wh.run_text("select * from main.dataset_versions order by all").fetchall()
    assert pq.read_metadata(stored).num_rows == 68

    os.utime(first, ns=(time.time_ns(), time.time_ns() + 10**9))  # a changed input: ingested afresh
    done = ingest("--data", str(first), failpoint="write:s.parquet:before_rename=interrupt")
    assert (done.returncode, done.stderr.splitlines()[-1]) == (130, "specdraft: interrupted"), done.stderr
    assert stored.read_bytes() == before
    assert sorted(p.name for p in stored.parent.iterdir()) == ["s.parquet"]
    with Warehouse(warehouse, read_only=True) as wh:
        assert wh.run_text("select * from main.dataset_versions order by all").fetchall() == catalog
