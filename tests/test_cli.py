"""The command line: help everywhere, one-line errors with exit code 1, data-only stdout."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specdraft.cli import main

from .helpers import write_text_traces

COMMANDS = sorted(main.commands)


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_top_level_help_lists_every_command():
    result = run(["--help"])
    assert result.exit_code == 0
    for command in ("run", "demo", "ingest", "build", "candidates", "calibrate", "evaluate", "report", "bench"):
        assert command in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_and_flag_has_help(command):
    result = run([command, "--help"])
    assert result.exit_code == 0
    for param in main.commands[command].params:
        if getattr(param, "help", None) is None and param.param_type_name == "option":
            pytest.fail(f"{command} {param.opts} has no help text")


def test_missing_file_is_one_line_exit_1(tmp_path):
    result = run(["run", "--data", str(tmp_path / "nope.parquet"), "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.parquet" in lines[0]
    assert result.stdout == ""


def test_the_command_ends_with_its_whole_output_and_its_exit_codes(tmp_path):
    """`python -m specdraft.cli` (entry(), which the `specdraft` script calls too) ends a successful
    run without the interpreter's teardown: its output still comes out whole into a pipe, and
    errors keep their codes and messages (entry lets them exit as usual)."""
    import subprocess
    import sys

    def command(*args):
        return subprocess.run([sys.executable, "-m", "specdraft.cli", *args], capture_output=True, text=True,
                              check=False)

    helped = command("--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("Usage: ")
    assert all(f"\n  {command} " in helped.stdout for command in COMMANDS)  # to the last line
    failed = command("run", "--data", str(tmp_path / "nope.parquet"), "--warehouse", str(tmp_path / "wh"))
    assert failed.returncode == 1 and "nope.parquet" in failed.stderr
    assert command("run", "--no-such-flag").returncode == 2


def test_missing_column_names_file_and_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"problem": ["p"], "split": ["train"]}), path)
    result = run(["run", "--data", str(path), "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1
    assert "bad.parquet" in result.stderr and "raw_reasoning" in result.stderr
    assert not (tmp_path / "wh" / "traces" / "bad.parquet").exists()


@pytest.mark.parametrize("flags, roles, column", [
    (["--reasoning-column", "problem"], "--problem-column and --reasoning-column", "problem"),
    (["--problem-column", "raw_reasoning"], "--problem-column and --reasoning-column", "raw_reasoning"),
    (["--split-column", "problem"], "--problem-column and --split-column", "problem"),
    (["--problem-source-column", "split"], "--split-column and --problem-source-column", "split"),
])
def test_one_column_in_two_roles_is_one_line(tmp_path, flags, roles, column):
    """It failed in polars' select with a DuplicateError traceback."""
    data = write_text_traces(tmp_path / "mini.parquet", [(split, "What is 2 plus 2?", "<think>4</think> 4")
                                                         for split in ("train", "calibration", "eval")])
    result = run(["ingest", "--data", str(data), "--warehouse", str(tmp_path / "wh"), *flags])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"{roles} both name column {column!r}" in result.stderr, result.stderr


def test_bad_flag_value_is_exit_1(tmp_path):
    result = run(["run", "--draft-len", "0", "--data", "x.parquet", "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1
    assert "--draft-len" in result.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400"])
def test_a_prior_strength_that_is_not_a_finite_count_is_refused(tmp_path, value):
    """A NaN prior failed deep in the seed policy's arrays, and under --preset default ran and
    wrote NaN into results.json, which is not JSON."""
    result = run(["run", "--policy-prior-strength", value, "--data", "x.parquet", "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1 and "--policy-prior-strength" in result.stderr, result.stderr
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("name", ["main", "Main", "temp", "system", "information_schema", "specdraft"])
def test_a_dataset_name_the_warehouse_or_duckdb_holds_is_refused(tmp_path, name):
    """`--name main` put the dataset's tables beside the catalog's, where every other dataset of
    the warehouse then found them; temp and system failed with DuckDB's binder error and left an
    empty schema behind."""
    data = _mini_traces(tmp_path)
    result = run(["run", "--preset", "seed", "--data", str(data), "--name", name, "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1 and f"dataset name {name!r} is reserved" in result.stderr, result.stderr
    assert not list((tmp_path / "wh" / "traces").iterdir())


def test_a_dataset_name_that_differs_from_anothers_in_case_only_is_refused(tmp_path):
    """DuckDB's schema names ignore case: `--name Tiny` beside a dataset `tiny` wrote its traces'
    tables into tiny's schema (a helper's review: parity_traces' 60 selected traces became the
    other dataset's 300) and made the catalog's latest dataset one no query could open."""
    data = _mini_traces(tmp_path)
    base = ["run", "--preset", "seed", "--data", str(data), "--warehouse", str(tmp_path / "wh")]
    tables = ["sql", "--warehouse", str(tmp_path / "wh"), "--dataset", "tiny", "--format", "csv",
              "select count(*) as n, max(trace_id) as last from selected_traces"]
    assert run([*base, "--name", "tiny"]).exit_code == 0
    before = run(tables).stdout
    result = run([*base, "--name", "Tiny", "--train-limit", "2"])
    assert result.exit_code == 1 and "dataset 'Tiny' would share its tables with dataset 'tiny'" in result.stderr
    assert run(tables).stdout == before and before.startswith("n,last\n")
    assert sorted(p.name for p in (tmp_path / "wh" / "traces").iterdir()) == ["tiny.parquet"]
    assert run([*base, "--name", "tiny"]).exit_code == 0  # its own name still runs


def test_a_warehouse_path_with_a_question_mark_is_refused_before_anything_is_made(tmp_path):
    """DuckDB reads what follows a '?' in a database path as options: a run there failed with a
    traceback from DuckDB's write-ahead log, under either engine (a helper's review)."""
    result = run(["run", "--preset", "seed", "--data", str(_mini_traces(tmp_path)), "--warehouse", str(tmp_path / "q?x"),
                  "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "a warehouse path cannot hold '?'" in result.stderr, result.stderr
    assert not (tmp_path / "q?x").exists() and not (tmp_path / "out").exists()


def test_paths_that_cannot_be_the_warehouse_or_the_outputs_fail_before_the_run(tmp_path):
    """A file where a directory must be is a usage error; a path under a file (which the system
    refuses) is one line naming it; either before anything is written, not after the run (--out
    was only made once the run had been recorded, and failed with a traceback)."""
    data = _mini_traces(tmp_path)
    a_file = tmp_path / "a_file"
    a_file.write_text("mine\n")
    warehouse = tmp_path / "wh"
    for args, exit_code, says in (
        (["--warehouse", str(a_file)], 2, "is a file"),
        (["--warehouse", str(warehouse), "--out", str(a_file)], 2, "is a file"),
        (["--warehouse", str(a_file / "wh")], 1, f"specdraft: error: {a_file}: Not a directory"),
        (["--warehouse", str(warehouse), "--out", str(a_file / "out")], 1, f"specdraft: error: {a_file}: Not a directory"),
    ):
        result = run(["run", "--preset", "seed", "--data", str(data), *args])
        assert result.exit_code == exit_code and says in result.stderr and "Traceback" not in result.stderr, \
            (args, result.stderr)
        assert not warehouse.exists() and a_file.read_text() == "mine\n"
    result = run(["compare", "a", "b", "--warehouse", str(warehouse), "--html", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.stderr
    # a directory where a report file goes: refused before the run (run), or before its first
    # file (report), not after results.json was written
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    result = run(["run", "--preset", "seed", "--data", str(data), "--warehouse", str(warehouse), "--out", str(out)])
    assert result.exit_code == 2 and f"{out / 'report.html'} is a directory" in result.stderr, result.stderr
    assert not warehouse.exists() and not (out / "results.json").exists()
    assert run(["run", "--preset", "seed", "--data", str(data), "--warehouse", str(warehouse),
                "--out", str(tmp_path / "good")]).exit_code == 0
    result = run(["report", "--warehouse", str(warehouse), "--out", str(out)])
    assert result.exit_code == 2 and f"{out / 'report.html'} is a directory" in result.stderr, result.stderr
    assert not (out / "results.json").exists()
    # a file on the way to an output: named as not a directory (mkdir said "File exists"), and
    # compare's page fails before the comparison is printed, not after
    run_id = json.loads((tmp_path / "good" / "results.json").read_text())["run_id"]
    for args in (["compare", run_id, run_id, "--html", str(a_file / "cmp.html")],
                 ["sql", "-o", str(a_file / "x.csv"), "--format", "csv", "select 1"],
                 ["export", "--out", str(a_file / "bundle")]):
        result = run([*args, "--warehouse", str(warehouse)])
        assert result.exit_code == 1 and result.stdout == "", (args, result.stdout)
        assert result.stderr == f"specdraft: error: {a_file}: Not a directory\n", (args, result.stderr)


def test_a_split_whose_responses_are_all_empty_fails_the_run_and_leaves_no_tables(tmp_path):
    """The seed drops responses with no tokens; a split left with none measured nothing (0
    positions, exit 0) or, with no train traces, exported a bundle that could not load. The n-gram
    stage's tables roll back, and the warehouse takes a good run after."""
    import duckdb

    rows = [("train", f"What is {i} plus {i}?", f"{i} + {i} = {2 * i}.") for i in range(20)]
    rows += [("calibration", "What is 3 plus 4?", "3 + 4 = 7."), ("eval", "What is 5 plus 6?", "  \n ")]
    data = write_text_traces(tmp_path / "no_eval.parquet", rows)
    warehouse = tmp_path / "wh"
    result = run(["run", "--preset", "seed", "--data", str(data), "--warehouse", str(warehouse), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1, result.stderr
    assert "dataset 'no_eval': no eval trace has a response left" in result.stderr
    with duckdb.connect(str(warehouse / "specdraft.duckdb"), read_only=True) as con:
        tables = {name for name, in con.execute("select table_name from duckdb_tables() where schema_name = 'no_eval'").fetchall()}
    assert "selected_traces" not in tables and "exact_continuations" not in tables, tables
    good = run(["run", "--preset", "seed", "--data", str(_mini_traces(tmp_path)), "--warehouse", str(warehouse),
                "--out", str(tmp_path / "o")])
    assert good.exit_code == 0, good.stderr


def test_a_memory_limit_too_small_to_open_the_warehouse_is_one_line(tmp_path):
    """At 1KB DuckDB ran out of memory reading the catalog, outside any sql/ file, which printed a
    traceback; now one line with what to change."""
    result = run(["run", "--preset", "seed", "--data", str(_mini_traces(tmp_path)), "--warehouse", str(tmp_path / "wh"),
                  "--memory-limit", "1KB"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith("specdraft: error: Out of Memory Error") and "raise --memory-limit" in result.stderr


def test_an_empty_query_is_a_usage_error(tmp_path):
    """`sql ""` and an empty --file printed nothing and exited 0."""
    empty = tmp_path / "empty.sql"
    empty.write_text("  \n")
    for args in (["  "], ["--file", str(empty)]):
        result = run(["sql", *args, "--warehouse", str(tmp_path / "wh")])
        assert result.exit_code == 2 and "is empty" in result.stderr, result.stderr


def test_lookup_before_the_tables_are_built_says_to_build_them(tmp_path):
    """After `ingest` alone, lookup failed on the SQL file's missing-table error."""
    warehouse = str(tmp_path / "wh")
    assert run(["ingest", "--data", str(_mini_traces(tmp_path)), "--warehouse", warehouse]).exit_code == 0
    result = run(["lookup", "What is 2 plus", "--warehouse", warehouse])
    assert result.exit_code == 1 and "dataset 'mini' has no n-gram tables yet" in result.stderr, result.stderr
    assert "specdraft build --name mini" in result.stderr


def test_unknown_flag_is_usage_error():
    assert run(["run", "--no-such-flag"]).exit_code == 2


def _mini_traces(tmp_path):
    """40 train traces of sums, one calibration and one eval trace: a run in seconds."""
    rows = [("train", f"What is {i} plus {i}?", f"<think>\n{i} + {i} = {2 * i}.\n</think> {2 * i}")
            for i in range(40)]
    rows += [("calibration", "What is 3 plus 4?", "<think>\n3 + 4 = 7.\n</think> 7"),
             ("eval", "What is 5 plus 6?", "<think>\n5 + 6 = 11.\n</think> 11")]
    return write_text_traces(tmp_path / "mini.parquet", rows)


def test_a_run_recorded_without_build_keys_on_a_new_warehouse(tmp_path):
    """record_run's build_keys default (None) failed with len(None) where run_builds was not made yet."""
    from specdraft.report.results import record_run
    from specdraft.warehouse.connection import Warehouse

    with Warehouse(tmp_path / "wh", dataset="x", memory_limit=None) as wh:
        run_id = record_run(wh, {"dataset": "x", "preset": "seed", "tokenizer": {"name": "t"}, "config": {}})
        assert wh.run_text("select count(*) from run_builds").fetchall() == [(0,)]
        assert wh.run_text("select run_id from main.runs").fetchall() == [(run_id,)]


def test_eval_position_drafts_shows_only_the_runs_that_chose_from_the_candidates_held(tmp_path):
    """The view joined every run's choices with the candidates of the latest build: after a run
    with another --draft-len, the first run's chosen source stood beside a draft of another length
    that accepted otherwise (a helper's review: 627 contradictory rows). It shows the runs whose
    candidates the warehouse holds."""
    data = _mini_traces(tmp_path)
    base = ["run", "--preset", "seed", "--data", str(data), "--warehouse", str(tmp_path / "wh")]
    query = ["sql", "--warehouse", str(tmp_path / "wh"), "--format", "csv",
             ("select run_id, count(*) as n, count(*) filter (where source = chosen_source and accepted <> "
              "chosen_accepted) as contradictory from eval_position_drafts group by run_id order by run_id")]
    runs = ["sql", "--warehouse", str(tmp_path / "wh"), "--format", "csv",
            "select run_id from main.runs order by created_at"]
    assert run(base).exit_code == 0
    first = run(runs).stdout.splitlines()[1]
    shown = run(query).stdout.splitlines()
    assert len(shown) == 2 and shown[1].startswith(first + ",") and shown[1].endswith(",0")
    assert run([*base, "--draft-len", "4"]).exit_code == 0
    latest = run(runs).stdout.splitlines()[2]
    shown = run(query).stdout.splitlines()
    assert len(shown) == 2 and shown[1].startswith(latest + ",") and shown[1].endswith(",0"), shown


def test_run_then_report(tmp_path):
    data = _mini_traces(tmp_path)
    out = tmp_path / "out"
    result = run(["run", "--data", str(data), "--warehouse", str(tmp_path / "wh"), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "selected" in result.stdout and "wrote" not in result.stdout  # stdout is the table only
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"] == "mini" and results["eval_examples"] == 1
    assert (out / "accepted_histogram.svg").read_text().startswith("<svg")
    # the run writes its report too, and says where
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert f"{out / 'report.html'}" in result.stderr
    again = run(["report", "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0
    recorded = json.loads((tmp_path / "again" / "results.json").read_text())
    assert recorded["selected"] == results["selected"] and recorded["run_id"] == results["run_id"]


def test_run_with_a_qwen35_tokenizer_offline(tmp_path):
    """The seed's own model family: --tokenizer Qwen/Qwen3.5-27B tokenizes offline and the run
    records that vocabulary's fingerprint, not Qwen2.5's."""
    from specdraft.sources.tokenizer import load_tokenizer

    data = _mini_traces(tmp_path)
    out = tmp_path / "out"
    result = run(["run", "--data", str(data), "--warehouse", str(tmp_path / "wh"), "--out", str(out),
                  "--tokenizer", "Qwen/Qwen3.5-27B"])
    assert result.exit_code == 0, result.stderr
    recorded = json.loads((out / "results.json").read_text())["tokenizer"]
    assert recorded == {"name": "Qwen/Qwen3.5-27B", "fingerprint": load_tokenizer("Qwen/Qwen3.5-27B").fingerprint}
    assert recorded["fingerprint"] != load_tokenizer("Qwen/Qwen2.5-7B-Instruct").fingerprint


def test_demo_runs_offline(tmp_path):
    result = run(["demo", "--traces", "200", "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "out"),
                  "--verify-cost", "0.07"])
    assert result.exit_code == 0, result.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["selected"]["avg_accepted"] > 0
    assert results["selected"]["avg_accepted"] <= results["oracle_best"]["avg_accepted"]
    # --verify-cost: the draft length chosen for it, beside the standard costs
    study = results["draft_length"]
    assert study["verify_costs"] == [0.0, 0.01, 0.02, 0.05, 0.07, 0.1] and study["chosen"]["verify_cost"] == 0.07
    assert study["chosen"]["adaptive"] == study["adaptive"]["0.07"]["speedup_at_its_cost"]
    assert "draft length at --verify-cost 0.07" in result.stdout
    assert run(["run", "--verify-cost", "-1", "--data", "x.parquet"]).exit_code == 1


def test_empty_completions_are_counted_not_silent(tmp_path):
    rows = [("train", f"What is {i} plus {i}?", f"<think>\n{i} + {i} = {2 * i}.\n</think> {2 * i}") for i in range(30)]
    rows += [("train", "An empty one", "   \n "), ("eval", "Empty too", ""),
             ("calibration", "What is 3 plus 4?", "<think>\n3 + 4 = 7.\n</think> 7"),
             ("eval", "What is 5 plus 6?", "<think>\n5 + 6 = 11.\n</think> 11")]
    data = write_text_traces(tmp_path / "mini.parquet", rows)
    result = run(["run", "--preset", "seed", "--data", str(data), "--warehouse", str(tmp_path / "wh"),
                  "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["dropped_empty_completions"] == {"eval": 1, "train": 1}
    assert results["train_examples"] == 30 and results["eval_examples"] == 1


@pytest.mark.parametrize("suffix, payload", [
    (".jsonl", b'{"problem": "a\xff", "raw_reasoning": "r", "split": "train"}\n'),
    (".csv", b'problem,raw_reasoning,split\n"a\xff",r,train\n'),
    (".jsonl", b'{"problem": "a", "raw_reasoning": "r", "split": "train"}\n{not json\n'),
])
def test_unreadable_input_is_one_line_naming_the_file(tmp_path, suffix, payload):
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(payload)
    result = run(["run", "--data", str(path), "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1
    assert f"broken{suffix}" in result.stderr and result.stderr.count("\n") == 1


def test_sql_is_read_only_unless_write(tmp_path):
    data = write_text_traces(tmp_path / "mini.parquet", [(split, "What is 2 plus 2?", "<think>4</think> 4")
                                                         for split in ("train", "calibration", "eval")])
    wh = str(tmp_path / "wh")
    assert run(["ingest", "--data", str(data), "--warehouse", wh]).exit_code == 0

    def sql(statement, *flags):
        return run(["sql", statement, "--warehouse", wh, "--format", "csv", *flags])

    def notes():
        return sql("select n from notes order by n").stdout  # unqualified: the dataset's schema

    def assert_refused(result):
        assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
        assert "read-only" in result.stderr and result.stdout == ""

    assert_refused(sql("create table notes as select 1 as n"))
    assert sql("select count(*) as n from duckdb_tables() where table_name = 'notes'").stdout == "n\n0\n"
    assert sql("create table notes as select 1 as n", "--write").exit_code == 0
    assert notes() == "n\n1\n"  # committed: a later command reads it
    assert_refused(sql("insert into notes values (2)"))
    assert notes() == "n\n1\n"
    assert sql("insert into notes values (2)", "--write").exit_code == 0
    assert notes() == "n\n1\n2\n"
    assert sql("select n from mini.notes order by n").stdout == notes()


def test_ctrl_c_inside_a_duckdb_statement_is_one_line():
    """Ctrl-C (SIGINT) while DuckDB runs a statement reaches the command as DuckDB's own
    RuntimeError('Query interrupted'), not KeyboardInterrupt: it printed a traceback and exited
    1. Here a real statement is interrupted once DuckDB reports it running (query_progress), not
    after a fixed sleep."""
    import os
    import signal
    import threading

    import click
    import duckdb

    from specdraft.cli import handle_errors

    con = duckdb.connect()
    con.execute("set enable_progress_bar = true")  # (query_progress is -1 without it)
    con.execute("set enable_progress_bar_print = false")

    def interrupt_once_running() -> None:
        while con.query_progress() <= 0:  # -1: no statement running yet
            threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    @click.command()
    @handle_errors
    def endless() -> None:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        # (not interrupted, it ends in seconds, and the test fails rather than hangs)
        con.execute("select count(*) from range(20000000000) t(x) where x % 7 = 3").fetchall()

    # Python's own SIGINT handler, as the CLI has it (an earlier test's library may have set
    # another, and DuckDB only stops for the KeyboardInterrupt this one raises)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = CliRunner().invoke(endless, [])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (result.exit_code, result.output) == (130, "specdraft: interrupted\n")


def test_the_spark_engine_without_its_extra_is_one_line(tmp_path, monkeypatch):
    """`--engine spark` on a core install (no sqlglot, no pyspark: the spark extra's) names the
    extra in one line; the module's import of sqlglot failed with a 40-line traceback."""
    import sys

    monkeypatch.setitem(sys.modules, "sqlglot", None)  # as not installed: importing it raises ImportError
    monkeypatch.delitem(sys.modules, "specdraft.tables.spark", raising=False)
    data = _mini_traces(tmp_path)
    result = CliRunner().invoke(main, ["build", "--data", str(data), "--engine", "spark",
                                       "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "--engine spark needs the spark extra: pip install 'specdraft[spark]'" in result.output


def test_demo_names_its_flag_for_a_bad_count(tmp_path):
    """`demo --traces -1` named the generator's argument (n_traces must be >= 0), not the flag."""
    result = CliRunner().invoke(main, ["demo", "--traces", "-1", "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 2 and "Invalid value for '--traces'" in result.output


def test_a_statement_out_of_memory_names_the_flag(tmp_path):
    """A sql/ file's statement out of memory said only DuckDB's error beside the file's name; the
    line now says what to change, as the catalog's out-of-memory error does."""
    result = run(["run", "--preset", "seed", "--data", str(_mini_traces(tmp_path)), "--warehouse", str(tmp_path / "wh"),
                  "--memory-limit", "8MB"])
    assert result.exit_code == 1, result.stderr
    assert result.stderr.count("\n") == 1 and ".sql: Out of Memory Error" in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("raise --memory-limit (DuckDB gets 70% of it)")


def test_a_backoff_minimum_above_every_length_is_said(tmp_path):
    """--backoff-min-context-len above every --backoff-context-lengths leaves the backoff source
    nothing to look up; the seed (and so the run) goes on without it, which used to be silent."""
    data, warehouse = str(_mini_traces(tmp_path)), str(tmp_path / "wh")
    result = run(["run", "--preset", "seed", "--data", data, "--warehouse", warehouse, "--out", str(tmp_path / "a"),
                  "--backoff-context-lengths", "2,3", "--backoff-min-context-len", "4"])
    assert result.exit_code == 0, result.stderr
    assert ("the backoff source proposes nothing: --backoff-min-context-len 4 is above every "
            "--backoff-context-lengths (3 the longest)") in result.stderr
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert results["per_source"]["backoff"]["proposed"] == 0
    # a minimum that leaves a length: no warning, and the source proposes
    result = run(["run", "--preset", "seed", "--data", data, "--warehouse", warehouse, "--out", str(tmp_path / "b"),
                  "--backoff-context-lengths", "2,3", "--backoff-min-context-len", "3"])
    assert result.exit_code == 0 and "backoff source" not in result.stderr, result.stderr
    assert json.loads((tmp_path / "b" / "results.json").read_text())["per_source"]["backoff"]["proposed"] > 0


def test_a_named_problem_source_column_that_is_missing_is_refused(tmp_path):
    """The problem source column is optional under its default name; a name the user gives that
    the data lacks (a typo) ran on without any source, silently (a helper's review)."""
    data = _mini_traces(tmp_path)
    result = run(["ingest", "--data", str(data), "--warehouse", str(tmp_path / "wh"), "--problem-source-column", "orign"])
    assert result.exit_code == 1 and "missing column 'orign'" in result.stderr, result.stderr
    assert run(["ingest", "--data", str(data), "--warehouse", str(tmp_path / "wh")]).exit_code == 0


def test_a_dataset_of_another_tokenizer_names_the_flag(tmp_path):
    """A dataset ingested with one tokenizer, run again without --tokenizer, said to use another
    --name; the likely fix is the dataset's own --tokenizer, which it now names first."""
    data, warehouse = str(_mini_traces(tmp_path)), str(tmp_path / "wh")
    assert run(["ingest", "--data", data, "--warehouse", warehouse, "--name", "mine",
                "--tokenizer", "Qwen/Qwen3.5-27B"]).exit_code == 0
    result = run(["ingest", "--data", data, "--warehouse", warehouse, "--name", "mine"])
    assert result.exit_code == 1
    assert ("was tokenized with Qwen/Qwen3.5-27B, not Qwen/Qwen2.5-7B-Instruct: pass --tokenizer Qwen/Qwen3.5-27B, "
            "or ingest it with Qwen/Qwen2.5-7B-Instruct under another name (--name) or in another --warehouse"
            ) in result.stderr, result.stderr


def test_demo_refuses_too_few_traces_and_a_bad_out_before_writing(tmp_path):
    """--traces 1 or 2 passed the option check and failed after writing the sample (no calibration
    split); a --out that cannot be a directory failed after the sample was written in the warehouse."""
    for traces in ("1", "2"):
        result = run(["demo", "--traces", traces, "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "out")])
        assert result.exit_code == 2 and "x>=3" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "afile").write_text("")
    result = run(["demo", "--traces", "30", "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path / "afile" / "out")])
    assert result.exit_code == 1 and "afile" in result.stderr, result.stderr
    assert not (tmp_path / "wh").exists()
