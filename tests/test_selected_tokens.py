"""A run tokenizes only the rows its limits select (sources/traces.py); a later run with wider
limits tokenizes the rest it needs, and the traces file then equals one tokenized in full.

Every comparison is against a fresh warehouse that ingested the same input with every row
selected (the behaviour before this change), and against the real offline Qwen tokenizer.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from specdraft.config import RunConfig
from specdraft.pipeline import RunInputs, run_until
from specdraft.sources.tokenizer import load_tokenizer
from specdraft.sources.traces import read_metadata

from .conftest import FIXTURES
from .test_append import cli, split_fixture

PARITY = FIXTURES / "parity_traces.parquet"
LIMITS = {"train_limit": 20, "calibration_limit": 4, "eval_limit": 0}


def ingest(warehouse, data=PARITY, **limits):
    return run_until("ingest", RunConfig(**limits), RunInputs(warehouse, data and str(data), name="traces"))


def rows(path):
    return pq.read_table(path).to_pylist()


def test_only_the_selected_rows_are_tokenized(tmp_path):
    path = ingest(tmp_path / "wh", **LIMITS)
    tokenizer = load_tokenizer(RunConfig().tokenizer)
    cut = {"train": 20, "calibration": 4, "eval": 10**9}
    stored = rows(path)
    assert len(stored) == pq.read_metadata(PARITY).num_rows  # every row, tokenized or not
    tokenized = [r for r in stored if r["split_row"] < cut[r["split"]]]
    assert 0 < len(tokenized) < len(stored)
    for row in stored:
        if row["split_row"] < cut[row["split"]]:
            assert row["prompt_tokens"] == tokenizer.encode(row["prompt"])
            assert row["completion_tokens"] == tokenizer.encode(row["completion"])
        else:
            assert row["prompt_tokens"] is None and row["completion_tokens"] is None
    assert read_metadata(path)["tokenized"] == {"train": 20, "calibration": 4, "eval": 0}


@pytest.mark.parametrize("wider", [{"train_limit": 30, "calibration_limit": 2, "eval_limit": 5}, {}])
def test_wider_limits_tokenize_the_rest_and_equal_a_full_ingest(tmp_path, wider):
    path = ingest(tmp_path / "wh", **LIMITS)
    assert ingest(tmp_path / "wh", **wider) == path
    meta = read_metadata(path)
    full = ingest(tmp_path / "full")
    if wider:  # the union of both runs' rows: train 30, calibration 4, eval all
        assert meta["tokenized"] == {"train": 30, "calibration": 4, "eval": 0}
        assert [r["split_row"] < 30 for r in rows(path) if r["split"] == "train"] == [
            r["prompt_tokens"] is not None for r in rows(path) if r["split"] == "train"]
    else:
        assert "tokenized" not in meta
        assert rows(path) == rows(full)
        assert {k: v for k, v in meta.items() if k != "source"} == \
               {k: v for k, v in read_metadata(full).items() if k != "source"}
    # the tokens of every row tokenized are the full ingest's
    for mine, theirs in zip(rows(path), rows(full), strict=True):
        if mine["prompt_tokens"] is not None:
            assert mine == theirs


def test_an_append_to_a_partly_tokenized_dataset_then_every_row(tmp_path):
    base, more, whole = split_fixture(tmp_path, {"train": 40, "calibration": 8, "eval": 8})
    ingest(tmp_path / "wh", data=base, **LIMITS)
    assert cli("ingest", "--append", "--data", more, "--name", "traces", "--warehouse", tmp_path / "wh").exit_code == 0
    path = ingest(tmp_path / "wh", data=None)  # the stored dataset, every row
    stored = rows(path)
    assert all(r["prompt_tokens"] is not None for r in stored)
    whole_rows = {(r["split"], r["split_row"]): r for r in rows(ingest(tmp_path / "full", data=whole))}
    for row in stored:
        theirs = whole_rows[row["split"], row["split_row"]]
        assert (row["prompt_tokens"], row["completion_tokens"]) == (theirs["prompt_tokens"], theirs["completion_tokens"])
