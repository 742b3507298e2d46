"""`specdraft ingest --append`: the tables update from the appended traces alone and equal a full
rebuild, table for table and in results.json; a refused or killed append changes nothing.

The parity fixture is split into a base part and appended parts (rows of each split, in order);
"full" ingests base + appended parts as one file into a fresh warehouse. Trace ids differ between
the two (appended rows get ids after the base's), so tables are compared with every trace id
mapped to its (split, split_row); a full build over the appended traces file itself is compared
as is.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.config import RunConfig
from specdraft.pipeline import run_all
from specdraft.tables.ngrams import build_ngram_tables
from specdraft.warehouse.connection import Warehouse

from .conftest import FIXTURES
from .test_parity import build_state, max_rank, rebuilt

STAGE_4 = ("selected_traces", "query_context_keys", "exact_continuation_counts", "exact_continuations",
           "backoff_next_tokens", "backoff_top_tokens")
SUMMARIES = ("selected", "oracle_best", "decode_step", "per_source", "exact_positions_added",
             "backoff_positions_added", "train_examples", "calibration_examples", "eval_examples",
             "dropped_empty_completions")
SMALL = {"max_completion_tokens": 160}
SPLITS = ("train", "calibration", "eval")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def split_fixture(tmp_path, *cuts: dict[str, int]) -> list:
    """The fixture's rows cut into parts at rows of each split: ({"train": 20, "calibration": 5,
    "eval": 5}, {"train": 30}) gives train rows [0, 20), [20, 30), [30, end), and calibration and
    eval rows [0, 5), none, [5, end). A split left out of the first cut is all in the first part;
    left out of a later cut, it has no rows in that part. Returns the parts' files and, last, all
    of them as one file."""
    rows = pl.read_parquet(FIXTURES / "parity_traces.parquet").with_columns(
        pl.int_range(pl.len()).over("split").alias("row"))
    bounds = [dict.fromkeys(SPLITS, 0)]
    for cut in cuts:
        bounds.append({split: cut.get(split, bounds[-1][split] if len(bounds) > 1 else 10**9) for split in SPLITS})
    bounds.append(dict.fromkeys(SPLITS, 10**9))
    paths = []
    for i, (lower, upper) in enumerate(itertools.pairwise(bounds)):
        part = rows.filter(pl.any_horizontal(
            (pl.col("split") == split) & (pl.col("row") >= lower[split]) & (pl.col("row") < upper[split])
            for split in SPLITS))
        paths.append(tmp_path / f"part{i}.parquet")
        part.drop("row").write_parquet(paths[-1])
    whole = tmp_path / "whole.parquet"
    pl.concat([pl.read_parquet(p) for p in paths]).write_parquet(whole)
    return [*paths, whole]


def tables(root, name: str = "ds", map_ids: bool = True) -> dict[str, list[tuple]]:
    """Every stage-4 table, all columns, sorted; trace ids as (split, split_row) when map_ids."""
    with Warehouse(root, read_only=True, dataset=name) as wh:
        ids = {t: (s, r) for t, s, r in wh.run_text("select trace_id, split, split_row from selected_traces")
               .fetchall()}
        out = {}
        for table in STAGE_4:
            if not wh.has_table(table):  # the full counts, kept only with --keep-counts
                continue
            result = wh.run_text(f"select * from {table}")
            columns = [c[0] for c in result.description]
            rows = [list(row) for row in result.fetchall()]
            for i, column in enumerate(columns):
                if map_ids and column in ("trace_id", "src_trace_id"):
                    for row in rows:
                        row[i] = ids[row[i]]
            out[table] = sorted(map(tuple, rows))
    return out


def latest_build_key(root, stage: str = "ngram_tables", name: str = "ds") -> str:
    with Warehouse(root, read_only=True, dataset=name) as wh:
        return wh.query("warehouse/build_key", {"stage": stage}).fetchall()[0][0]


def assert_same_results(incremental: dict, full: dict) -> None:
    for key in SUMMARIES:
        assert incremental[key] == full[key], key


CASES = {
    # no caps or limits; appended to every split, in two appends (the first train rows only)
    "everything": (RunConfig(preset="seed", keep_counts=True, max_index_positions=0, backoff_max_index_positions=0, **SMALL),
                   ({"train": 24, "calibration": 5, "eval": 5}, {"train": 33})),
    # both index caps fall inside the appended train traces; the limits cut appended rows
    "caps and limits bind": (RunConfig(preset="seed", keep_counts=True, max_index_positions=5000, backoff_max_index_positions=6000,
                                       train_limit=36, calibration_limit=8, eval_limit=7, **SMALL),
                             ({"train": 24, "calibration": 5, "eval": 5},)),
    # the base already fills the caps and the train limit: only calibration and eval keys are added
    "caps already full": (RunConfig(preset="seed", keep_counts=True, max_index_positions=3000, backoff_max_index_positions=3500,
                                    train_limit=24, **SMALL),
                          ({"train": 24, "calibration": 5, "eval": 5},)),
}


@pytest.mark.parametrize("case", CASES)
def test_append_updates_the_tables_as_a_full_rebuild_would(tmp_path, case):
    cfg, cuts = CASES[case]
    *parts, whole = split_fixture(tmp_path, *cuts)
    root = tmp_path / "incremental"
    base = run_all(cfg, root, str(parts[0]), "unused", name="ds")
    before = tables(root)
    first_new = base_rows = pq.read_metadata(root / "traces" / "ds.parquet").num_rows
    for part in parts[1:]:
        appended = cli("ingest", "--append", "--data", part, "--name", "ds", "--warehouse", root)
        assert appended.exit_code == 0, appended.stderr
        assert appended.stdout.strip() == str(root / "traces" / "ds.parquet")
        # no --data: the stored dataset, appended traces and all
        incremental = run_all(cfg, root, None, "unused", name="ds")
        assert latest_build_key(root).endswith(f"|updated_from={first_new}")  # not rebuilt: updated
        first_new = pq.read_metadata(root / "traces" / "ds.parquet").num_rows
    full = run_all(cfg, tmp_path / "full", str(whole), "unused", name="ds")
    assert not latest_build_key(tmp_path / "full").endswith(f"|updated_from={base_rows}")

    after = tables(root)
    assert after == tables(tmp_path / "full")
    assert_same_results(incremental, full)
    # the same tables as a full build over the appended traces file itself, trace ids unmapped
    with Warehouse(tmp_path / "rebuilt", dataset="ds") as wh:
        build_ngram_tables(wh, cfg, root / "traces" / "ds.parquet")
    assert tables(root, map_ids=False) == tables(tmp_path / "rebuilt", map_ids=False)
    # what each case is about actually happened
    for table in ("selected_traces", "query_context_keys"):
        assert len(after[table]) > len(before[table])
    grew = after["exact_continuation_counts"] != before["exact_continuation_counts"]
    if case == "caps and limits bind":
        assert base["exact_positions_added"] < cfg.max_index_positions == full["exact_positions_added"]
        assert base["backoff_positions_added"] < cfg.backoff_max_index_positions == full["backoff_positions_added"]
        assert full["train_examples"] == cfg.train_limit < pl.read_parquet(whole).filter(
            pl.col("split") == "train").height
        assert grew
    elif case == "caps already full":
        assert base["exact_positions_added"] == cfg.max_index_positions
        assert not grew and after["backoff_next_tokens"] == before["backoff_next_tokens"]
    else:
        assert grew


def test_without_kept_counts_an_append_rebuilds_the_tables_in_full(tmp_path):
    cfg = RunConfig(preset="seed", **SMALL)
    base, extra, whole = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    root = tmp_path / "incremental"
    run_all(cfg, root, str(base), "unused", name="ds")
    assert cli("ingest", "--append", "--data", extra, "--name", "ds", "--warehouse", root).exit_code == 0
    appended = run_all(cfg, root, None, "unused", name="ds")
    assert "|updated_from=" not in latest_build_key(root)  # no counts to merge into: rebuilt
    full = run_all(cfg, tmp_path / "full", str(whole), "unused", name="ds")
    assert tables(root) == tables(tmp_path / "full")
    assert_same_results(appended, full)


def _run_then_append(tmp_path):
    """A seed run of 30/6/6 fixture rows as dataset `ds`, then an append of the rest, by the CLI."""
    cfg = RunConfig(preset="seed", keep_counts=True, **SMALL)
    base, extra, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    root = tmp_path / "wh"
    flags = ["--preset", "seed", "--keep-counts", "--max-completion-tokens", "160", "--warehouse", root]
    assert cli("run", "--data", base, "--name", "ds", "--out", tmp_path / "a", *flags).exit_code == 0
    assert cli("ingest", "--append", "--data", extra, "--name", "ds", *flags).exit_code == 0
    return cfg, base, extra, root, flags


def test_inputs_recorded_with_the_earlier_signature_are_still_known(tmp_path, monkeypatch):
    """Datasets ingested, and traces appended, before 2026-12-07 recorded a directory's signature
    over every file in it. Such a dataset is still the stored one (it was ingested afresh,
    dropping its appends), and such an append is still refused a second time."""
    import specdraft.sources.append
    import specdraft.sources.dataset
    from specdraft.sources.dataset import source_signature

    base, extra, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    folder, more = tmp_path / "splits", tmp_path / "more"
    for directory, part in ((folder, base), (more, extra)):
        directory.mkdir()
        rows = pl.read_parquet(part)
        for split in SPLITS:
            rows.filter(pl.col("split") == split).drop("split").write_parquet(directory / f"{split}.parquet")
        (directory / "README.txt").write_text("where these came from")  # not read, but signed before
    root = tmp_path / "wh"
    args = ["--name", "ds", "--warehouse", root]
    def earlier_source_signature(data, dataset, columns, earlier=False):
        return source_signature(data, dataset, columns, earlier=True)

    with monkeypatch.context() as old:  # the earlier code's signatures
        old.setattr(specdraft.sources.dataset, "source_signature", earlier_source_signature)
        old.setattr(specdraft.sources.append, "source_signature", earlier_source_signature)
        assert cli("ingest", "--data", folder, *args).exit_code == 0
        assert cli("ingest", "--append", "--data", more, *args).exit_code == 0
    stored = _state(root)
    again = cli("ingest", "--append", "--data", more, *args)
    assert again.exit_code == 1 and "already in dataset 'ds'" in again.stderr
    assert cli("ingest", "--data", folder, *args).exit_code == 0
    assert _state(root) == stored  # the dataset and its append, as they were


def test_a_run_before_an_append_keeps_its_text_but_not_its_drafts(tmp_path):
    """An append keeps every trace, and its id: the report of a run before it still embeds its
    traces' text (not their drafts, the candidates being rebuilt), and compare still pairs it with
    a run after it on the same eval traces (the append added none)."""
    from specdraft.report.compare import compare_runs
    from specdraft.report.results import load_run
    from specdraft.report.trace_browser import browser_data

    base, extra, _rest, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6}, {"train": 36})
    root = tmp_path / "wh"
    cfg = RunConfig(preset="seed", **SMALL)
    before = run_all(cfg, root, str(base), "unused", name="ds")
    assert cli("ingest", "--append", "--data", extra, "--name", "ds", "--warehouse", root).exit_code == 0
    after = run_all(cfg, root, None, "unused", name="ds")
    assert after["train_examples"] > before["train_examples"] and after["eval_examples"] == before["eval_examples"]
    with Warehouse(root, read_only=True, dataset="ds", memory_limit=None) as wh:
        page = browser_data(wh, load_run(root, before["run_id"]))
    assert page["drafts_note"].startswith("drafts not shown") and page["traces"]
    assert all(trace["tokens"] for trace in page["traces"])
    assert compare_runs(root, before["run_id"], after["run_id"])["same_traces"]
    # a run recorded before run_builds is taken at its dataset's name, against a run after them too
    forget = f"delete from ds.run_builds where run_id = '{before['run_id']}'"
    assert cli("sql", "--write", "--warehouse", root, forget).exit_code == 0
    assert compare_runs(root, before["run_id"], after["run_id"])["same_traces"]


def test_runs_after_an_append_use_the_appended_dataset_and_reuse_its_tables(tmp_path):
    cfg, base, _extra, root, flags = _run_then_append(tmp_path)
    # --data pointing at the original file: the stored dataset with its appended traces
    assert cli("run", "--data", base, "--name", "ds", "--out", tmp_path / "b", *flags).exit_code == 0
    key = latest_build_key(root)
    assert "|updated_from=" in key
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    total = pl.read_parquet(FIXTURES / "parity_traces.parquet").height
    assert sum(results[f"{split}_examples"] for split in ("train", "calibration", "eval")) == total
    # then without --data: nothing to rebuild, no build_state row added
    state = build_state(root, "ds")
    assert cli("run", "--name", "ds", "--out", tmp_path / "c", *flags).exit_code == 0
    assert build_state(root, "ds") == state
    again = json.loads((tmp_path / "c" / "results.json").read_text())
    assert_same_results(again, results)
    # a changed setting rebuilds in full
    assert max_rank(root, "ds") == cfg.max_continuations_per_context
    run_all(RunConfig(**{**cfg.to_dict(), "max_continuations_per_context": 2}), root, None, "unused", name="ds")
    assert rebuilt(state, build_state(root, "ds")) == {"ngram_tables", "candidates"}
    assert "|updated_from=" not in latest_build_key(root) and max_rank(root, "ds") == 2
    with Warehouse(root, read_only=True) as wh:
        versions = wh.run_text(
            "select traces, source from main.dataset_versions where name = 'ds' order by ingested_at").fetchall()
    assert [v[0] for v in versions] == [42, total]
    assert json.loads(versions[1][1])["splits"] == {"train": 12, "calibration": 3, "eval": 3}


def _state(root) -> tuple:
    """The dataset's traces file and catalog rows."""
    data = (root / "traces" / "ds.parquet").read_bytes()
    with Warehouse(root, read_only=True) as wh:
        catalog = wh.run_text("select * from main.dataset_versions order by ingested_at").fetchall()
    return data, catalog


@pytest.fixture
def ingested(tmp_path):
    base, extra, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    root = tmp_path / "wh"
    assert cli("ingest", "--data", base, "--name", "ds", "--warehouse", root).exit_code == 0
    return root, extra


def test_append_with_another_tokenizer_is_one_line_and_changes_nothing(tmp_path, ingested):
    from .test_tokenizer import _write_local_hf_tokenizer

    root, extra = ingested
    tokenizer = tmp_path / "tiny"
    _write_local_hf_tokenizer(tokenizer)
    before = _state(root)
    result = cli("ingest", "--append", "--data", extra, "--name", "ds", "--tokenizer", tokenizer,
                 "--warehouse", root)
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "tokenized with Qwen/Qwen2.5-7B-Instruct" in result.stderr and result.stdout == ""
    assert _state(root) == before


def test_append_needs_an_existing_dataset_and_new_rows(tmp_path, ingested):
    root, extra = ingested
    missing = cli("ingest", "--append", "--data", extra, "--name", "nope", "--warehouse", root)
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1 and "no dataset 'nope'" in missing.stderr
    before = _state(root)
    assert cli("ingest", "--append", "--data", extra, "--name", "ds", "--warehouse", root).exit_code == 0
    twice = cli("ingest", "--append", "--data", extra, "--name", "ds", "--warehouse", root)
    assert twice.exit_code == 1 and "already in dataset 'ds'" in twice.stderr
    assert _state(root) != before


def test_a_failed_append_changes_nothing(ingested, monkeypatch):
    import specdraft.sources.append

    root, extra = ingested
    before = _state(root)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(specdraft.sources.append, "record_dataset_version", fail)
    with pytest.raises(OSError):
        cli("ingest", "--append", "--data", extra, "--name", "ds", "--warehouse", root)
    assert _state(root) == before
    assert sorted(p.name for p in (root / "traces").iterdir()) == ["ds.parquet"]


def killed_at(point: str, *args) -> subprocess.CompletedProcess:
    """`specdraft *args` killed (SIGKILL) by the failpoint `point` (specdraft.failpoints)."""
    env = {**os.environ, "SPECDRAFT_FAILPOINT": f"{point}=kill"}
    return subprocess.run([sys.executable, "-m", "specdraft.cli", *args], capture_output=True, check=False, env=env)


def test_a_killed_append_leaves_the_dataset_as_it_was_or_complete(ingested):
    root, extra = ingested
    before = _state(root)
    expected = pq.read_metadata(root / "traces" / "ds.parquet").num_rows + pq.read_metadata(extra).num_rows
    args = ["ingest", "--append", "--data", str(extra), "--name", "ds", "--warehouse", str(root)]
    # killed just before the new file replaces the old one: nothing changed
    process = killed_at("write:ds.parquet:before_rename", *args)
    assert process.returncode == -9
    assert _state(root) == before
    # killed after the rename, before the catalog's commit: the next run brings the catalog up to
    # date, and the tables then cover every trace
    process = killed_at("write:ds.parquet:after_rename", *args)
    assert process.returncode == -9
    rows = pq.read_metadata(root / "traces" / "ds.parquet").num_rows
    assert rows == expected and _state(root)[1] == before[1]
    run_all(RunConfig(preset="seed", **SMALL), root, None, "unused", name="ds")
    assert _state(root)[1][-1][5] == rows
    assert not [p for p in (root / "traces").iterdir() if p.name != "ds.parquet"]  # no partial file left
    with duckdb.connect(str(root / "specdraft.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from ds.selected_traces").fetchall()[0][0] == rows


def _catalog(root) -> list[tuple]:
    with Warehouse(root, read_only=True) as wh:
        return wh.run_text("select traces, source from main.dataset_versions where name = 'ds' "
                           "order by ingested_at").fetchall()


def test_an_append_after_a_killed_write_records_every_version(tmp_path):
    """Killed between the traces file's rename and the catalog's commit, an ingest or an append
    left its version out of the catalog; the next command, an append too, records it (and the
    vocab table a killed ingest never made) before its own, so the catalog ends as the clean
    commands' does. It recorded only its own version: the ingest's, or the first append's, row
    was missing for good, and a later run then recorded the ingest with the appended count."""
    base, first, second, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6}, {"train": 36})
    clean, root = tmp_path / "clean", tmp_path / "wh"
    for command in (("ingest", "--data", base), ("ingest", "--append", "--data", first),
                    ("ingest", "--append", "--data", second)):
        assert cli(*command, "--name", "ds", "--warehouse", clean).exit_code == 0
    expected = [traces for traces, _ in _catalog(clean)]
    assert len(expected) == 3
    args = ["--name", "ds", "--warehouse", str(root)]
    assert killed_at("write:ds.parquet:after_rename", "ingest", "--data", str(base), *args).returncode == -9
    assert killed_at("write:ds.parquet:after_rename", "ingest", "--append", "--data", str(first), *args).returncode == -9
    assert cli("ingest", "--append", "--data", second, *args).exit_code == 0
    catalog = _catalog(root)
    assert [traces for traces, _ in catalog] == expected
    assert [json.loads(source)["splits"] for _, source in catalog[1:]] == [
        json.loads(source)["splits"] for _, source in _catalog(clean)[1:]]
    with Warehouse(root, read_only=True, dataset="ds") as wh:
        assert wh.row_count("vocab") > 0
        # each row its own time (they order the catalog: rows recorded in one transaction tied,
        # and the latest, which main.datasets shows, was either)
        assert wh.run_text("select count(distinct ingested_at) from main.dataset_versions").fetchall() == [(3,)]
        assert wh.run_text("select traces from main.datasets where name = 'ds'").fetchall() == [(expected[-1],)]
    run_all(RunConfig(preset="seed", **SMALL), root, None, "unused", name="ds")
    assert _catalog(root) == catalog  # the run found it up to date
    # a catalog that lost every row: all three recorded again, in their order, each its own time
    assert cli("sql", "--write", "--warehouse", root, "delete from main.dataset_versions").exit_code == 0
    run_all(RunConfig(preset="seed", **SMALL), root, None, "unused", name="ds")
    assert _catalog(root) == catalog
    with Warehouse(root, read_only=True) as wh:
        assert wh.run_text("select count(distinct ingested_at) from main.dataset_versions").fetchall() == [(3,)]
        assert wh.run_text("select traces from main.datasets where name = 'ds'").fetchall() == [(expected[-1],)]


def test_a_changed_original_input_replaces_the_dataset_and_its_appends(tmp_path):
    """`run --data ORIGINAL` after ORIGINAL changed: the dataset is ingested afresh from it, its
    appends are gone, the catalog records the new version, and the tables equal a fresh run's."""
    cfg, base, extra, root, flags = _run_then_append(tmp_path)
    original = pl.read_parquet(base)
    changed = original.slice(1)  # the first train row removed
    changed.write_parquet(base)
    rerun = cli("run", "--data", base, "--name", "ds", "--out", tmp_path / "b", *flags)
    assert rerun.exit_code == 0, rerun.stderr
    traces = pq.read_table(root / "traces" / "ds.parquet")
    assert traces.num_rows == changed.height and "appends" not in json.loads(
        traces.schema.metadata[b"specdraft"])
    with Warehouse(root, read_only=True) as wh:
        versions = wh.run_text("select traces, source from main.dataset_versions where name = 'ds' "
                                  "order by ingested_at").fetchall()
        catalog = wh.run_text("select traces from main.datasets where name = 'ds'").fetchall()
    appended = original.height + pq.read_metadata(extra).num_rows
    assert [v[0] for v in versions] == [original.height, appended, changed.height]
    assert catalog == [(changed.height,)]
    assert json.loads(versions[-1][1])["files"][0][1] == base.stat().st_size  # the changed file's signature
    fresh = run_all(cfg, tmp_path / "fresh", str(base), "unused", name="ds")
    assert tables(root, map_ids=False) == tables(tmp_path / "fresh", map_ids=False)
    assert_same_results(json.loads((tmp_path / "b" / "results.json").read_text()), fresh)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_appends_from_jsonl_and_csv_with_column_flags_equal_parquet_appends(tmp_path, suffix):
    """The same appended rows, as Parquet with the seed's column names or as JSONL/CSV with other
    names mapped by the column flags, give the same traces file."""
    base, extra, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    rows = pl.read_parquet(extra)
    assert rows["problem_source"].is_not_null().any()  # so a lost --problem-source-column shows
    renamed = rows.rename({"problem": "q", "problem_source": "src", "raw_reasoning": "cot", "split": "part"})
    other = tmp_path / f"more{suffix}"
    if suffix == ".jsonl":
        renamed.write_ndjson(other)
    else:
        renamed.write_csv(other)
    column_flags = ["--problem-column", "q", "--problem-source-column", "src", "--reasoning-column", "cot",
                    "--split-column", "part"]
    for label, data, flags in (("parquet", extra, []), ("other", other, column_flags)):
        assert cli("ingest", "--data", base, "--name", "ds", "--warehouse", tmp_path / label).exit_code == 0
        appended = cli("ingest", "--append", "--data", data, "--name", "ds", "--warehouse", tmp_path / label,
                       *flags)
        assert appended.exit_code == 0, appended.stderr
    traces = {label: pq.read_table(tmp_path / label / "traces" / "ds.parquet") for label in ("parquet", "other")}
    assert traces["other"].num_rows == pq.read_metadata(base).num_rows + rows.height
    assert traces["other"].replace_schema_metadata().equals(traces["parquet"].replace_schema_metadata())


def test_a_killed_appends_traces_partial_goes_at_the_next_writers_open(tmp_path):
    """An ingest or append killed while writing its traces file left `.ds.parquet.<pid>.partial`
    (as large as the dataset) in traces/, which only a later write of that same file removed: a
    dataset never written again kept it for good. Any writer's open now sweeps the partials of
    writers no longer running; one whose writer runs is kept."""
    base, first, _ = split_fixture(tmp_path, {"train": 30, "calibration": 6, "eval": 6})
    root = tmp_path / "wh"
    args = ["--name", "ds", "--warehouse", str(root)]
    assert cli("ingest", "--data", base, *args).exit_code == 0
    stored = (root / "traces" / "ds.parquet").read_bytes()
    assert killed_at("write:ds.parquet:before_rename", "ingest", "--append", "--data", str(first),
                     *args).returncode == -9
    left = [p.name for p in (root / "traces").iterdir() if p.name.endswith(".partial")]
    assert len(left) == 1 and left[0].startswith(".ds.parquet."), left
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        running = root / "traces" / f".other.parquet.{live.pid}.partial"  # a live writer's: kept
        running.write_text("being written")
        assert cli("sql", "--write", "--warehouse", root, "select 1").exit_code == 0
        assert sorted(p.name for p in (root / "traces").iterdir()) == sorted(["ds.parquet", running.name])
    finally:
        live.communicate(b"")
    assert (root / "traces" / "ds.parquet").read_bytes() == stored
