"""Reading while a run builds (warehouse/snapshot.py): a run held at a failpoint, in its own
process, while `specdraft sql`, the notebook handle, `lookup`, `report` and `compare` read the
warehouse.

The run is paused, not timed: it waits at the failpoint until the test releases it, so a reader that
waited for the writer would never answer (the test would hang until pytest's timeout), and one that
answers shows the state as of the pause exactly."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import specdraft
from specdraft.warehouse.connection import Warehouse
from specdraft.warehouse.snapshot import SNAPSHOT_FILE

from .conftest import FIXTURES
from .test_reliability import KILL_FLAGS, OTHER, cli

DATA = str(FIXTURES / "parity_traces.parquet")
# What a reader is asked: which n-gram tables are there (the killed-run settings keep 2
# continuations per context, the first run's keep more), and how many runs are recorded.
STATE_QUERY = ("select max(rank) as continuations, count(*) as rows, "
               "(select count(*) from main.runs) as runs from exact_continuations")
PAUSE_WAIT_S = 120  # how long the test waits for the run to reach a pause before failing


def from_snapshot(root: Path) -> bool:
    """Does a reader open the snapshot now, rather than the warehouse file (which a writer must
    then hold locked)?"""
    with Warehouse(root, read_only=True, memory_limit=None) as wh:
        return wh.snapshot


def marker_in_snapshot(root: Path) -> list[tuple]:
    """main.marker's rows in the snapshot file itself, opened directly (a reader might open the
    warehouse file instead): the commit the copy holds."""
    import duckdb

    copy = duckdb.connect(str(root / SNAPSHOT_FILE), read_only=True)
    try:
        return copy.execute("select n from main.marker").fetchall()
    finally:
        copy.close()


def state(root: Path) -> tuple[tuple[int, ...], float]:
    """STATE_QUERY's answer (continuations, rows, runs) through `specdraft sql` (in this
    process), and how long it took."""
    started = time.perf_counter()
    result = cli("sql", "--warehouse", root, "--format", "csv", STATE_QUERY)
    took = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    header, row = result.stdout.split()
    assert header == "continuations,rows,runs"
    return tuple(map(int, row.split(","))), took


def until(ask, done):
    """ask() until done(answer), up to PAUSE_WAIT_S: the answer."""
    deadline = time.monotonic() + PAUSE_WAIT_S
    while not done(answer := ask()):
        assert time.monotonic() < deadline, f"still {answer}"
        time.sleep(0.01)
    return answer


class HeldRun:
    """`specdraft run` in its own process, pausing at the given failpoints in turn: `wait_for`
    waits until it has reached the next one, `release` lets it go on to the next."""

    def __init__(self, root: Path, points: list[str]) -> None:
        self.log = root.parent / "failpoints.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDRAFT_FAILPOINT")}
        env["SPECDRAFT_FAILPOINT"] = ";".join(f"{point}=pause" for point in points)
        env["SPECDRAFT_FAILPOINT_LOG"] = str(self.log)
        command = [sys.executable, "-m", "specdraft.cli", "run", *KILL_FLAGS, *OTHER, "--data", DATA,
                   "--warehouse", str(root), "--out", str(root.parent / "out2")]
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(self, point: str) -> None:
        def reached() -> str:
            assert self.process.poll() is None, self.process.stderr.read()  # ended without reaching it
            return self.log.read_text() if self.log.exists() else ""

        until(reached, lambda log: f"failpoint {point} reached" in log)

    def release(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self) -> int:
        self.process.stdin.close()
        self.process.wait(timeout=PAUSE_WAIT_S)
        return self.process.returncode


@pytest.fixture
def built(tmp_path) -> Path:
    """A warehouse with one run recorded, and a snapshot of it."""
    root = tmp_path / "wh"
    assert cli("run", *KILL_FLAGS, "--data", DATA, "--warehouse", root, "--out", tmp_path / "out").exit_code == 0
    return root


def test_readers_answer_the_last_committed_state_while_a_run_builds(built):
    before, _ = state(built)
    run = HeldRun(built, ["transaction:ngram_tables:before_commit", "transaction:candidates:after_commit"])
    try:
        # the new n-gram tables are written, not committed: readers see the state before the run
        run.wait_for("transaction:ngram_tables:before_commit")
        held, took = state(built)
        assert held == before and took < 1.0 and from_snapshot(built)
        with specdraft.open(built) as notebook:  # the handle too, and it holds nothing open
            assert notebook.sql("select count(*) as n from main.runs")["n"].to_list() == [1]
        lookup = cli("lookup", "--warehouse", built, "--format", "json", "the answer is")
        assert lookup.exit_code == 0 and json.loads(lookup.stdout)
        run_id = cli("sql", "--warehouse", built, "--format", "csv", "select run_id from main.runs").stdout.split()[1]
        report = cli("report", "--warehouse", built, "--out", built.parent / "held_report")
        assert report.exit_code == 0 and (built.parent / "held_report" / "report.html").exists()
        compare = cli("compare", "--warehouse", built, run_id, run_id)
        assert compare.exit_code == 0 and run_id in compare.stdout
        run.release()
        # the n-gram tables and candidates are committed, the run not yet recorded; readers see
        # them once their copy is in (it runs beside the build; the run waits here meanwhile)
        run.wait_for("transaction:candidates:after_commit")
        middle, took = until(lambda: state(built), lambda answer: answer[0] != before)
        assert middle[-1] == before[-1] and took < 1.0
        assert from_snapshot(built)  # the writer still holds its file: publishing kept its lock
        run.release()
    finally:
        code = run.finish()
    assert code == 0
    after, _ = state(built)  # no run building: the warehouse file itself, with the second run
    assert not from_snapshot(built)
    assert after[:-1] == middle[:-1] and after[-1] == before[-1] + 1


def test_a_run_starts_while_a_notebook_handle_is_open(built):
    """specdraft.open opens the warehouse per query, so a writer is never locked out by it."""
    with specdraft.open(built) as notebook:
        assert len(notebook.runs()) == 1
        run = HeldRun(built, [])
        assert run.finish() == 0
        assert len(notebook.runs()) == 2


def test_what_was_written_outside_a_run_is_in_the_snapshot_of_the_next(built):
    """`specdraft sql --write` changes the warehouse file after the last snapshot; the next run
    copies it again (with its first commit's copy, snapshot.QUIET_S after it, the run held before
    the next), so its readers see that change, and nothing half-written is left beside the copy."""
    assert cli("sql", "--warehouse", built, "--write", "create table main.notes as select 42 as answer").exit_code == 0
    run = HeldRun(built, ["transaction:ngram_tables:before_commit"])
    try:
        run.wait_for("transaction:ngram_tables:before_commit")
        result = until(lambda: cli("sql", "--warehouse", built, "--format", "csv", "select answer from main.notes"),
                       lambda result: result.exit_code == 0)
        assert result.stdout.split() == ["answer", "42"]
    finally:
        run.process.kill()
        run.finish()
    assert [p.name for p in built.iterdir() if "partial" in p.name] == []
    assert (built / SNAPSHOT_FILE).exists()


def test_a_runs_readers_see_what_was_written_before_it_even_as_it_commits(built, monkeypatch):
    """A writer that opens a warehouse changed since its snapshot (`sql --write`) copies that
    state at once. Its copy used to wait snapshot.QUIET_S and be given up at the writer's first
    commit, seconds later; as a run's stages commit faster than that, its readers saw the state
    from before the change (a table gone, fewer runs) until the run ended. Here no copy waits
    out its timer, so the snapshot holds only what was copied at open."""
    from specdraft.warehouse import snapshot

    monkeypatch.setattr(snapshot, "QUIET_S", 3600.0)
    assert cli("sql", "--warehouse", built, "--write", "create table main.marker as select 7 as n").exit_code == 0
    with Warehouse(built, memory_limit=None) as writer:
        with writer.transaction("first_commit"):
            writer.run_text("create table main.later as select 1 as n")
        assert marker_in_snapshot(built) == [(7,)]


SLOW_COPY = """
import sys, time
with open(sys.argv[1], "rb") as source, open(sys.argv[2], "wb") as copy:
    while chunk := source.read(1 << 20):
        copy.write(chunk)
        time.sleep(0.01)
"""


def test_a_copy_made_while_a_transaction_writes_reads_as_the_last_checkpoint(tmp_path):
    """What snapshot.py rests on, checked on the DuckDB installed: a copy of the file made while
    a transaction writes (new tables, deletes, inserts and updates of a checkpointed one; the
    copier slowed so that dozens of statements land during it) is the last checkpoint's state,
    every table whole and every block's checksum good. Written from the experiment that chose
    the design: 5 rounds of 22-27 statements during each copy, every copy exact."""
    import duckdb

    db = tmp_path / "main.duckdb"
    con = duckdb.connect(str(db))
    con.execute("set checkpoint_threshold = '1000TB'")
    con.execute("create table t as select range as i, hash(range) as h from range(1000000)")
    con.execute("checkpoint")
    for round in range(2):
        expected = {"t": con.execute("select count(*), sum(h) from t").fetchall()}
        expected |= {name: con.execute(f"select count(*), sum(h) from {name}").fetchall()
                     for (name,) in con.execute("select table_name from duckdb_tables() where table_name != 't'").fetchall()}
        copier = subprocess.Popen([sys.executable, "-c", SLOW_COPY, str(db), str(tmp_path / f"copy{round}.duckdb")])
        con.execute("begin")
        statements = 0
        while copier.poll() is None:
            con.execute(f"create or replace table u{round}_{statements % 3} as "
                        f"select range as i, hash(range + {statements}) as h from range(1000000)")
            con.execute("delete from t where i % 7 = 0")
            con.execute(f"insert into t select range + {10**7 * (statements + 1)}, 1 from range(200000)")
            con.execute("update t set h = 0 where i % 11 = 0")
            statements += 4
        assert copier.returncode == 0 and statements >= 8  # the copy overlapped the writes
        copy = duckdb.connect(str(tmp_path / f"copy{round}.duckdb"), read_only=True)
        got = {name: copy.execute(f"select count(*), sum(h) from {name}").fetchall()
               for (name,) in copy.execute("select table_name from duckdb_tables()").fetchall()}
        copy.close()
        assert got == expected
        con.execute("commit")
        con.execute("checkpoint")
    con.close()


# A writer that commits once and hands the copy's pid out, then closes when told and exits.
COMMIT_AND_EXIT = """
import sys
from specdraft.warehouse.connection import Warehouse
wh = Warehouse(sys.argv[1], memory_limit=None)
with wh.transaction("test"):
    wh.run_text("create or replace table main.marker as select 7 as n")
wh._copy.start()  # at once, not once snapshot.QUIET_S has passed
print(wh._copy.process.pid, flush=True)
sys.stdin.readline()
wh.close()
"""


def test_the_last_copy_holds_the_lock_after_its_writer_has_exited(built):
    """A writer that ends while its last copy runs does not wait for it: the copy inherits the
    writer's lock and holds it until the copy is in. Here the copy is stopped (SIGSTOP) so that it
    is certainly still running: the writer exits; readers read the warehouse file meanwhile; a next
    writer waits (the lock names a process that has ended) rather than failing, and goes on once
    the copy is let go (SIGCONT)."""
    import signal

    writer = subprocess.Popen([sys.executable, "-c", COMMIT_AND_EXIT, str(built)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    copier = int(writer.stdout.readline())
    os.kill(copier, signal.SIGSTOP)
    try:
        writer.stdin.write("close\n")
        writer.stdin.flush()
        assert writer.wait(timeout=PAUSE_WAIT_S) == 0  # ended, its copy still there
        result = cli("sql", "--warehouse", built, "--format", "csv", "select n from main.marker")
        assert result.exit_code == 0 and result.stdout.split() == ["n", "7"]
        follower = subprocess.Popen([sys.executable, "-m", "specdraft.cli", "sql", "--warehouse", str(built), "--write",
                                     "create table main.after as select 1 as n"], stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):  # waiting for the lock, not refused
            follower.wait(timeout=3)
    finally:
        os.kill(copier, signal.SIGCONT)
    assert follower.wait(timeout=PAUSE_WAIT_S) == 0, follower.stderr.read()
    with Warehouse(built, read_only=True, memory_limit=None) as wh:
        assert wh.run_text("select count(*) from main.after").fetchall() == [(1,)]
    assert marker_in_snapshot(built) == [(7,)]  # the copy that was stopped is whole


# A writer whose first copy stops itself before it copies anything (as a slow copy would still
# be running), then commits again and exits once that commit's copy is in.
COMMIT_TWICE = """
import sys
from specdraft.warehouse import snapshot
from specdraft.warehouse.connection import Warehouse
copy_script = snapshot.COPY_SCRIPT
snapshot.COPY_SCRIPT = "kill -STOP $$; " + copy_script
wh = Warehouse(sys.argv[1], memory_limit=None)
with wh.transaction("first"):
    wh.run_text("create or replace table main.marker as select 7 as n")
wh._copy.start()  # at once, not once snapshot.QUIET_S has passed
print(wh._copy.process.pid, flush=True)
snapshot.COPY_SCRIPT = copy_script
with wh.transaction("second"):
    wh.run_text("create or replace table main.marker as select 8 as n")
wh.close()
snapshot.Copy.wait_for_pending()
"""


def test_a_newer_commit_stops_the_copy_of_an_older_one(built):
    """A commit made while the copy of the one before it still runs does not wait for that copy (it
    would be out of date when done): it is stopped. Here the first copy stops itself (SIGSTOP)
    before copying, so a writer that waited for it would wait until the test's timeout. The newer
    commit's copy is the snapshot, and no partial file is left."""
    from specdraft.files import partial_path
    from specdraft.warehouse.snapshot import snapshot_path

    writer = subprocess.Popen([sys.executable, "-c", COMMIT_TWICE, str(built)], stdout=subprocess.PIPE, text=True)
    copier = int(writer.stdout.readline())
    try:
        assert writer.wait(timeout=60) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(copier, signal.SIGKILL)  # a writer that waited: let the test end
    with pytest.raises(ProcessLookupError):  # stopped for good, not let go
        os.kill(copier, 0)
    assert not partial_path(snapshot_path(built)).exists()
    assert marker_in_snapshot(built) == [(8,)]


def test_publishing_keeps_the_row_groups_a_stage_wrote(tmp_path):
    """The checkpoint of publish_snapshot writes the commit's WAL and nothing else: the row groups
    a parallel insert wrote (here two scans unioned, each leaving a partial one) stay as written,
    where DuckDB's vacuum would merge and compress them again (0.6 s of the development set's
    candidates stage)."""
    wh = Warehouse(tmp_path / "wh", memory_limit=None)
    try:
        for part in ("a", "b"):
            wh.run_text(f"create temp table {part} as select range as i, hash(range) as h from range(300000)")
        with wh.transaction("test"):
            wh.run_text("create table parts as select * from a union all select * from b")
        row_groups = ("select row_group_id, sum(count) as n, list(block_id order by column_id, block_id) "
                      "from pragma_storage_info('parts') where segment_type <> 'VALIDITY' and column_id = 0 "
                      "group by all order by all")
        written = wh.run_text(row_groups).fetchall()
        assert any(n < 122880 for _, n, _ in written[:-1])  # partial row groups, which a vacuum merges
        wh.publish_snapshot()
        assert wh.run_text(row_groups).fetchall() == written
        assert wh.run_text("select count(*), sum(i) from parts").fetchall() == [(600000, 2 * sum(range(300000)))]
    finally:
        wh.close()


# A writer that commits three times in quick succession and closes; each copy started writes a
# line first.
COMMIT_THRICE = """
import sys
from specdraft.warehouse import snapshot
from specdraft.warehouse.connection import Warehouse
snapshot.QUIET_S = 600.0  # far longer than three commits take
snapshot.COPY_SCRIPT = 'echo started >> "$1.copies"; ' + snapshot.COPY_SCRIPT
wh = Warehouse(sys.argv[1], memory_limit=None)
for n in (7, 8, 9):
    with wh.transaction("test"):
        wh.run_text(f"create or replace table main.marker as select {n} as n")
wh.close()
snapshot.Copy.wait_for_pending()
"""


def test_commits_in_quick_succession_copy_only_the_last(built):
    """A commit's copy waits snapshot.QUIET_S for the writer's next commit, and the writer's close
    starts it at once: three commits and a close copy the file once, as the last commit left it."""
    from specdraft.files import partial_path
    from specdraft.warehouse.snapshot import snapshot_path

    subprocess.run([sys.executable, "-c", COMMIT_THRICE, str(built)], check=True, timeout=PAUSE_WAIT_S)
    assert (built / "specdraft.duckdb.copies").read_text().split() == ["started"]
    assert not partial_path(snapshot_path(built)).exists()
    assert marker_in_snapshot(built) == [(9,)]


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs util-linux's flock(1)")
def test_a_writer_dropped_without_closing_still_copies_its_last_commit(tmp_path, monkeypatch):
    """A writer that lets go of its lock's descriptor before its copy starts (dropped without
    closing, as a test's or a notebook's may be: garbage collection closes it) still has that copy
    made, and under the lock, held by the copy's own descriptor of it: the copying shell finds it
    taken (flock(1) cannot take it), and the copy is of the last commit."""
    from specdraft.warehouse import snapshot
    from specdraft.warehouse.lock import LOCK_FILE

    root = tmp_path / "wh"
    monkeypatch.setenv("WAREHOUSE_LOCK", str(root / LOCK_FILE))
    monkeypatch.setattr(snapshot, "COPY_SCRIPT",
                        'flock -n "$WAREHOUSE_LOCK" true && echo free >> "$WAREHOUSE_LOCK.log"; ' + snapshot.COPY_SCRIPT)
    wh = Warehouse(root, memory_limit=None)
    with wh.transaction("test"):
        wh.run_text("create or replace table main.marker as select 7 as n")
    wh._release_lock()  # what collecting the dropped writer does first
    snapshot.Copy.wait_for_pending()
    assert not (root / f"{LOCK_FILE}.log").exists()  # the lock was held while it copied
    assert marker_in_snapshot(root) == [(7,)]
    wh.close()
