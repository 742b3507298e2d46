"""Exact parity with the seed reference (../shared/tools/reference_metrics.py), and what a rerun
reuses.

The fixture and its two reference outputs (without and with the split limits) are described in
tests/fixtures/README.md. The live test on ../shared/data runs when SPECDRAFT_SHARED_PARITY=1,
which .ci/run sets where that directory exists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.config import RunConfig
from specdraft.pipeline import run_all

from .conftest import FIXTURES, SHARED_DATA

PAIRS = (("selected", "every_position"), ("oracle_best", "oracle_best"), ("decode_step", "decode_step_causal"))
FIXTURE = FIXTURES / "parity_traces.parquet"
# The seed flags both stored reference outputs were made with (tests/fixtures/README.md); the
# second adds LIMITS, which cut every split of the fixture (42 / 9 / 9 rows).
FIXTURE_FLAGS = ["--max-completion-tokens", "160", "--max-index-positions", "5000",
                 "--backoff-max-index-positions", "6000"]
LIMITS = ["--train-limit", "30", "--calibration-limit", "6", "--eval-limit", "5"]


def config_of(flags: list[str]) -> RunConfig:
    """The --preset seed config of seed flags given as ["--name", "value", ...]."""
    pairs = dict(zip(flags[::2], flags[1::2]))
    return RunConfig(preset="seed", **{k.lstrip("-").replace("-", "_"): int(v) for k, v in pairs.items()})


SEED = config_of(FIXTURE_FLAGS)


def _histogram(summary: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in summary["histogram"].items()}


def assert_parity(results: dict, reference: dict) -> None:
    for ours, theirs in PAIRS:
        assert _histogram(results[ours]) == _histogram(reference[theirs]), ours
        assert results[ours]["avg_accepted"] == reference[theirs]["avg_accepted"], ours
    assert results["exact_positions_added"] == reference["exact_positions_added"]
    assert results["backoff_positions_added"] == reference["backoff_positions_added"]
    for split in ("train", "calibration", "eval"):
        assert results[f"{split}_examples"] == reference[f"{split}_examples"]


@pytest.fixture(scope="module")
def fixture_results(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("warehouse")
    return run_all(SEED, warehouse, str(FIXTURE), "unused")


def test_fixture_parity(fixture_results):
    reference = json.loads((FIXTURES / "parity_reference.json").read_text())
    assert_parity(fixture_results, reference)


def test_fixture_exercises_every_source(fixture_results):
    for family, summary in fixture_results["per_source"].items():
        assert summary["proposed"] > 0, family


def test_fixture_parity_with_split_limits(tmp_path):
    """`specdraft run --preset seed` with the limit flags, against the reference run with the same
    flags: the limits must take the first N rows of each split, as the seed's maybe_limit does."""
    result = CliRunner().invoke(main, ["run", "--preset", "seed", "--data", str(FIXTURE), *FIXTURE_FLAGS,
                                       *LIMITS, "--warehouse", str(tmp_path / "wh"), "--out", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    reference = json.loads((FIXTURES / "parity_reference_limits.json").read_text())
    assert_parity(json.loads((tmp_path / "results.json").read_text()), reference)
    # the limits cut every split, and the n-gram index cap still binds within the 30 train rows
    rows = dict(pl.read_parquet(FIXTURE).group_by("split").len().iter_rows())
    limits = dict(zip(LIMITS[::2], map(int, LIMITS[1::2])))
    for split in ("train", "calibration", "eval"):
        assert reference[f"{split}_examples"] == limits[f"--{split}-limit"] < rows[split], split
    assert reference["exact_positions_added"] == SEED.max_index_positions


# --- what a rerun reuses: build_state records every build, a reuse adds nothing ----------------


def build_state(root: Path, name: str = "parity_traces") -> list[tuple]:
    """build_state's rows (stage, build_key, built_at), oldest first. A stage's build appends one
    (an n-gram build also one for candidates with key null, in the same transaction); a reuse none."""
    with duckdb.connect(str(root / "specdraft.duckdb"), read_only=True) as con:
        return con.execute(f'select stage, build_key, built_at from "{name}".build_state '
                           "order by built_at, stage, build_key nulls first").fetchall()


def rebuilt(before: list[tuple], after: list[tuple]) -> set[str]:
    """The stages built between two build_state readings (earlier rows are never rewritten)."""
    assert after[: len(before)] == before
    return {stage for stage, key, _ in after[len(before):] if key is not None}


def table_checksums(root: Path, name: str = "parity_traces") -> dict[str, tuple]:
    """Row count and order-independent checksum (sum of row hashes) of every table of the dataset,
    but build_state, and eval_positions and run_builds (every run adds its rows)."""
    with duckdb.connect(str(root / "specdraft.duckdb"), read_only=True) as con:
        tables = [t for (t,) in con.execute("select table_name from duckdb_tables() where schema_name = ? "
                                            "order by table_name", [name]).fetchall()
                  if t not in ("build_state", "eval_positions", "run_builds")]
        return {t: con.execute(f'select count(*), sum(hash(t)) from "{name}"."{t}" as t').fetchall()[0]
                for t in tables}


def max_rank(root: Path, name: str = "parity_traces") -> int:
    with duckdb.connect(str(root / "specdraft.duckdb"), read_only=True) as con:
        return con.execute(f'select max(rank) from "{name}".exact_continuations').fetchall()[0][0]


@pytest.fixture
def built(tmp_path):
    """A warehouse with the fixture run once (--preset seed), its results and build_state."""
    results = run_all(SEED, tmp_path, str(FIXTURE), "unused")
    return tmp_path, results, build_state(tmp_path)


def test_rerun_reuses_every_table(built):
    root, first, state = built
    tables = table_checksums(root)
    assert {"exact_continuations", "candidates"} <= set(tables)
    second = run_all(SEED, root, str(FIXTURE), "unused")
    assert build_state(root) == state  # nothing built again: no row added, every built_at unchanged
    assert table_checksums(root) == tables
    for key in ("selected", "oracle_best", "decode_step", "per_source"):
        assert first[key] == second[key]


def test_a_changed_table_setting_rebuilds_the_tables(built):
    root, first, state = built
    tables = table_checksums(root)
    assert max_rank(root) == SEED.max_continuations_per_context  # 8 continuations kept somewhere
    third = run_all(replace(SEED, max_continuations_per_context=1), root, str(FIXTURE), "unused")
    assert rebuilt(state, build_state(root)) == {"ngram_tables", "candidates"}
    assert max_rank(root) == 1
    assert table_checksums(root)["exact_continuations"] != tables["exact_continuations"]
    # the seed's n-gram drafter proposes the top continuation only, so the drafts do not change
    assert third["selected"] == first["selected"]


def test_a_changed_policy_setting_rebuilds_no_table(built):
    root, first, state = built
    tables = table_checksums(root)
    changed = run_all(replace(SEED, policy_prior_strength=0.0), root, str(FIXTURE), "unused")
    assert changed["policy"]["source_avg"] != first["policy"]["source_avg"]  # the setting took effect
    assert build_state(root) == state
    assert table_checksums(root) == tables


def test_a_changed_code_file_rebuilds_its_stage_and_the_later_ones(tmp_path, monkeypatch):
    """pipeline.code_fingerprint hashes every file of a kept stage's package and of the earlier
    stages' (specdraft/<package>/ and sql/<package>/), of the packages they use (candidates: the
    policy's families and features), and the shared code. Pointed at a copy of the tree, an edit
    of one file (a comment) rebuilds the stage whose package it is in and the stages after it, but
    no earlier stage; a file no stage's tables depend on (the report's), none."""
    from specdraft import pipeline
    from specdraft.warehouse import sql_files

    tree = tmp_path / "tree"
    shutil.copytree(pipeline.PACKAGE_DIR, tree / "specdraft", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(sql_files.SQL_DIR, tree / "sql", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(pipeline, "PACKAGE_DIR", tree / "specdraft")
    monkeypatch.setattr(sql_files, "SQL_DIR", tree / "sql")  # the SQL is read (and hashed) there
    root = tmp_path / "wh"
    run_all(SEED, root, str(FIXTURE), "unused")
    for edited, stages in (("sql/drafters/candidates.sql", {"candidates"}),
                           ("specdraft/drafters/autocomplete.py", {"candidates"}),
                           ("sql/tables/exact_continuations.sql", {"ngram_tables", "candidates"}),
                           ("specdraft/tables/spark.py", {"ngram_tables", "candidates"}),
                           ("specdraft/config.py", {"ngram_tables", "candidates"}),
                           ("specdraft/policy/confidence.py", {"candidates"}),
                           ("sql/policy/eval_traces.sql", {"candidates"}),
                           ("specdraft/warehouse/connection.py", {"ngram_tables", "candidates"}),
                           ("specdraft/pipeline.py", {"ngram_tables", "candidates"}),
                           ("specdraft/report/charts.py", set())):
        before = build_state(root)
        with (tree / edited).open("a") as f:
            f.write("\n-- an edit that changes no result\n" if edited.endswith(".sql") else "\n# an edit\n")
        run_all(SEED, root, str(FIXTURE), "unused")
        assert rebuilt(before, build_state(root)) == stages, edited


# --- the development set, live ----------------------------------------------------------------

SMOKE = ["--train-limit", "200", "--calibration-limit", "32", "--eval-limit", "16",
         "--max-completion-tokens", "128", "--max-index-positions", "100000",
         "--backoff-max-index-positions", "100000"]
REFERENCE = SHARED_DATA.parent / "tools" / "reference_metrics.py"
ROLLOUTS = SHARED_DATA / "qwen25-math-rollouts.parquet"


@pytest.mark.skipif(not os.environ.get("SPECDRAFT_SHARED_PARITY"),
                    reason="set SPECDRAFT_SHARED_PARITY=1 where ../shared/data exists (.ci/run does)")
def test_smoke_parity_on_development_set(tmp_path):
    """The seed's smoke flags on the real development set, the reference run live (16-34 s on 2
    cores: cheap enough to run live rather than store its output)."""
    assert ROLLOUTS.exists() and REFERENCE.exists(), f"SPECDRAFT_SHARED_PARITY is set: {ROLLOUTS} and {REFERENCE} needed"
    reference = json.loads(subprocess.run(
        [sys.executable, str(REFERENCE), str(ROLLOUTS), *SMOKE], check=True, capture_output=True, text=True
    ).stdout)
    assert_parity(run_all(config_of(SMOKE), tmp_path, str(ROLLOUTS), "unused"), reference)
