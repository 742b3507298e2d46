"""The default preset: the confidence policy over more sources, multi-draft metrics, leave-one-out."""

from __future__ import annotations

import pytest

from specdraft.confidence import SELECTABLE
from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.pipeline import run_all

from .conftest import FIXTURES

FLAGS = dict(max_completion_tokens=160, max_index_positions=5000, backoff_max_index_positions=6000)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("warehouse")
    return run_all(RunConfig(**FLAGS), warehouse, str(FIXTURES / "parity_traces.parquet"), "unused",
                   leave_one_out=True)


def test_metrics_are_ordered(results):
    avg = {k: results[k]["avg_accepted"] for k in ("selected", "oracle_best")}
    top2, top4 = (results["multi_draft"][k]["avg_accepted"] for k in ("top2", "top4"))
    assert 0 < avg["selected"] <= top2 <= top4 <= avg["oracle_best"] <= 16
    assert results["preset"] == "default"


def test_every_source_reports(results):
    assert set(SELECTABLE) <= set(results["per_source"])
    for family in SELECTABLE:
        assert results["per_source"][family]["positions"] == results["selected"]["positions"]


def test_leave_one_out_covers_each_choice(results):
    table = results["leave_one_out"]
    assert list(table) == list(SELECTABLE)
    for row in table.values():
        assert row["marginal"] == pytest.approx(results["selected"]["avg_accepted"] - row["selected_without"])


def test_fit_is_deterministic(tmp_path):
    data = str(FIXTURES / "parity_traces.parquet")
    first = run_all(RunConfig(**FLAGS), tmp_path / "a", data, "unused")
    second = run_all(RunConfig(**FLAGS), tmp_path / "b", data, "unused")
    assert first["selected"] == second["selected"] and first["decode_step"] == second["decode_step"]


def test_leave_one_out_needs_the_default_preset(tmp_path):
    with pytest.raises(SpecdraftError, match="--preset default"):
        run_all(RunConfig(preset="seed", **FLAGS), tmp_path, str(FIXTURES / "parity_traces.parquet"), "unused",
                leave_one_out=True)
