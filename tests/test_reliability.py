"""Reliability: one writer at a time with a clear message, kill -9 at any point loses nothing,
hostile names cannot reach SQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.errors import SpecdraftError
from specdraft.warehouse import Warehouse

from .conftest import FIXTURES

DATA = str(FIXTURES / "parity_traces.parquet")
SMALL = ["--max-completion-tokens", "160", "--max-index-positions", "5000", "--backoff-max-index-positions", "6000"]


def cli(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def specdraft_process(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specdraft.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_second_writer_and_readers_get_a_clear_busy_message(tmp_path):
    assert cli("run", "--preset", "seed", "--data", DATA, "--warehouse", str(tmp_path), "--out",
               str(tmp_path / "out"), *SMALL).exit_code == 0
    holder = subprocess.Popen(
        [sys.executable, "-c",
         ("import sys, time; from specdraft.warehouse import Warehouse; w = Warehouse(sys.argv[1]); "
         "print('ready', flush=True); time.sleep(30)"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(SpecdraftError, match=rf"warehouse is busy \(pid {holder.pid}, since "):
            Warehouse(tmp_path)
        with pytest.raises(SpecdraftError, match=rf"warehouse is busy \(pid {holder.pid}, since "):
            Warehouse(tmp_path, read_only=True)
        result = cli("sql", "--warehouse", str(tmp_path), "select count(*) from main.runs")
        assert result.exit_code == 1 and f"busy (pid {holder.pid}" in result.stderr
        assert result.stderr.count("\n") == 1
    finally:
        holder.kill()
        holder.wait()
    # the lock goes with the process, even on kill -9
    with Warehouse(tmp_path, read_only=True) as wh:
        assert wh.query("report/run_results", {"run_id": ""}).fetchall()


def _snapshot(root) -> dict:
    """What an analyst would read: the recorded runs and the tables' row counts and sums."""
    with Warehouse(root, read_only=True, dataset="parity_traces") as wh:
        runs = wh.con.execute("select run_id, results from main.runs order by run_id").fetchall()
        tables = wh.con.execute(
            "select table_name from information_schema.tables where table_schema = 'parity_traces' "
            "order by table_name").fetchall()
        sums = wh.con.execute(
            "select (select count(*) from exact_continuations), (select sum(count) from exact_continuations), "
            "(select count(*) from candidates), (select sum(accepted) from candidates)").fetchall()
    return {"runs": runs, "tables": tables, "sums": sums}


KILL_AFTER = (0.5, 1.0, 1.5, 2.5, 3.5, 5.0)


def test_kill_9_at_any_point_loses_nothing(tmp_path):
    """Build, snapshot, then start another build (other settings) and kill -9 it at several points.
    Each time the warehouse must read exactly as before or with the new stage complete, with no
    half-made tables; a final rerun must give the same results as a clean run."""
    root = tmp_path / "wh"
    base = ["--data", DATA, "--warehouse", str(root), *SMALL]
    assert cli("run", "--preset", "seed", "--out", str(tmp_path / "a"), *base).exit_code == 0
    before = _snapshot(root)
    clean = cli("run", "--preset", "seed", "--max-continuations-per-context", "2", "--out", str(tmp_path / "c"),
                "--data", DATA, "--warehouse", str(tmp_path / "clean"), *SMALL)
    assert clean.exit_code == 0
    complete = _snapshot(tmp_path / "clean")
    assert complete["sums"] != before["sums"]  # the two builds differ, so a half-way state would show
    other = ["run", "--preset", "seed", "--max-continuations-per-context", "2", "--out", str(tmp_path / "b"), *base]
    tried, damaged = 0, 0
    for delay in KILL_AFTER:
        process = specdraft_process(*other)
        time.sleep(delay)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        tried += 1
        after = _snapshot(root)
        # the first run is still recorded as it was, and no stage left half-made tables behind
        if (after["runs"][: len(before["runs"])] != before["runs"] or after["tables"] != before["tables"]
                or after["sums"] not in (before["sums"], complete["sums"])):
            damaged += 1
    assert tried == len(KILL_AFTER) and damaged == 0
    finished = cli(*other)
    assert finished.exit_code == 0
    assert _snapshot(root)["sums"] == complete["sums"]
    resumed = json.loads((tmp_path / "b" / "results.json").read_text())
    fresh = json.loads((tmp_path / "c" / "results.json").read_text())
    for key in ("selected", "oracle_best", "decode_step", "per_source"):
        assert resumed[key] == fresh[key]


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


@pytest.mark.parametrize("flags, named", [
    (["--draft-len", "0"], "--draft-len"),
    (["--max-index-positions", "-1"], "--max-index-positions"),
    (["--backoff-max-index-positions", "-5"], "--backoff-max-index-positions"),
    (["--context-lengths", "1,abc"], "context lengths"),
    (["--context-lengths", "0,4"], "--context-lengths"),
    (["--backoff-context-lengths", "5000"], "--backoff-context-lengths"),
    (["--eval-limit", "-2"], "--eval-limit"),
    (["--max-continuations-per-context", "0"], "--max-continuations-per-context"),
])
def test_flags_out_of_range_are_one_line(tmp_path, flags, named):
    result = cli("run", *flags, "--data", DATA, "--warehouse", str(tmp_path))
    assert result.exit_code == 1
    assert named in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "specdraft.duckdb").exists()  # nothing written
