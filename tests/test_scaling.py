"""The scaling curve (specdraft.measure.scaling, `specdraft scaling`): one pipeline run per train size in one
warehouse, each point equal to a separate run at that train limit; the JSON, the chart and the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import xml.etree.ElementTree as ET

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.measure.scaling import default_sizes, parse_sizes, scaling_curve, scaling_table, write_scaling
from specdraft.pipeline import RunInputs, run_all

from .conftest import FIXTURES

DATA = str(FIXTURES / "parity_traces.parquet")
# The parity test's flags: both index caps bind on the fixture, so the counters move with the size.
CFG = RunConfig(max_completion_tokens=160, max_index_positions=5000, backoff_max_index_positions=6000, preset="seed")
SIZES = (20, 7, 42)
NS = "{http://www.w3.org/2000/svg}"


def fixture_train_rows() -> int:
    splits = pq.read_table(DATA, columns=["split"]).column("split")
    return pc.sum(pc.equal(splits, "train")).as_py()


@pytest.fixture(scope="module")
def curve(tmp_path_factory) -> list[dict]:
    return scaling_curve(CFG, RunInputs(tmp_path_factory.mktemp("warehouse"), DATA), sizes=SIZES)


def test_one_point_per_size_smallest_first(curve):
    assert [p["rows"] for p in curve] == sorted(SIZES)
    assert len({p["run_id"] for p in curve}) == len(SIZES)
    assert [p["label"] for p in curve] == ["7 seed", "20 seed", "42 seed"]


@pytest.mark.parametrize("index", range(len(SIZES)))
def test_each_point_equals_a_separate_run(curve, tmp_path, index):
    point = curve[index]
    results = run_all(RunConfig(**{**CFG.to_dict(), "train_limit": point["rows"]}), tmp_path, DATA, "unused")
    assert point["avg_accepted"] == results["selected"]["avg_accepted"]
    assert point["decode_step_avg_accepted"] == results["decode_step"]["avg_accepted"]
    assert point["oracle_best_avg_accepted"] == results["oracle_best"]["avg_accepted"]
    for key in ("exact_positions_added", "backoff_positions_added", "train_examples"):
        assert point[key] == results[key], key


def test_all_train_rows_equals_the_seed_reference(curve):
    reference = json.loads((FIXTURES / "parity_reference.json").read_text())
    last = curve[-1]
    assert last["rows"] == fixture_train_rows() == reference["train_examples"]
    assert last["avg_accepted"] == reference["every_position"]["avg_accepted"]
    assert last["decode_step_avg_accepted"] == reference["decode_step_causal"]["avg_accepted"]
    assert last["exact_positions_added"] == reference["exact_positions_added"]


def test_more_train_rows_index_more_positions(curve):
    for smaller, larger in itertools.pairwise(curve):
        assert smaller["exact_positions_added"] < larger["exact_positions_added"]
        assert smaller["backoff_positions_added"] <= larger["backoff_positions_added"]
        assert smaller["train_examples"] < larger["train_examples"]


def test_default_series_doubles_up_to_all_train_rows(tmp_path):
    n = fixture_train_rows()
    points = scaling_curve(CFG, RunInputs(tmp_path, DATA))
    assert [p["rows"] for p in points] == [n // 8, n // 4, n // 2, n]
    assert [p["train_examples"] for p in points] == [p["rows"] for p in points]  # no empty responses here


def test_sizes_past_the_train_split_use_all_of_it(tmp_path):
    n = fixture_train_rows()
    points = scaling_curve(CFG, RunInputs(tmp_path, DATA), sizes=(10, n + 1, 10 * n))
    assert [p["rows"] for p in points] == [10, n]


def test_default_sizes_and_parse_sizes():
    assert default_sizes(6988) == (873, 1747, 3494, 6988)
    assert default_sizes(40) == (5, 10, 20, 40)
    assert default_sizes(2) == (1, 2)
    assert default_sizes(100, points=2) == (50, 100)
    assert parse_sizes("5000, 2000,5000,") == (2000, 5000)
    for bad in ("0,x", "0", "", "2000,-1", "1.5"):
        with pytest.raises(SpecdraftError):
            parse_sizes(bad)


def test_json_and_chart(curve, tmp_path):
    json_path, svg_path = write_scaling(curve, tmp_path / "out")
    assert json.loads(json_path.read_text()) == curve
    root = ET.fromstring(svg_path.read_text(encoding="utf-8"))
    assert root.tag == f"{NS}svg"
    assert "parity_traces" in root.find(f"{NS}title").text
    markers = [c for c in root.iter(f"{NS}circle") if c.get("class") == "marker"]
    assert len(markers) == 2 * len(curve)
    by_series: dict[str, list] = {}
    for marker in markers:
        by_series.setdefault(marker.get("data-series"), []).append(marker)
    assert set(by_series) == {"selected", "decode_step"}
    for series, key in (("selected", "avg_accepted"), ("decode_step", "decode_step_avg_accepted")):
        got = by_series[series]
        assert [int(m.get("data-x")) for m in got] == [p["rows"] for p in curve]
        assert [float(m.get("data-y")) for m in got] == pytest.approx([p[key] for p in curve], abs=1e-5)
        # Higher values sit higher (smaller y), further right for more rows.
        order = sorted(range(len(got)), key=lambda i: curve[i][key])
        assert sorted(range(len(got)), key=lambda i: -float(got[i].get("cy"))) == order
        assert [float(m.get("cx")) for m in got] == sorted(float(m.get("cx")) for m in got)
    assert len([line for line in root.iter(f"{NS}polyline")]) == 2
    assert "<script" not in svg_path.read_text()


def test_table_has_a_row_per_point(curve):
    lines = scaling_table(curve).splitlines()
    assert len(lines) == 2 + len(curve)
    assert len({len(line) for line in lines}) == 1
    for line, point in zip(lines[2:], curve):
        cells = line.split()
        assert int(cells[0]) == point["rows"]
        assert cells[4] == f"{point['avg_accepted']:.3f}"


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_cli_help():
    result = run(["scaling", "--help"])
    assert result.exit_code == 0
    assert "--train-sizes" in result.output and "--out" in result.output
    assert "scaling" in run(["--help"]).output


@pytest.mark.parametrize("sizes", ["0,x", "0", "abc", "10,-5"])
def test_cli_bad_train_sizes_is_usage_error(tmp_path, sizes):
    result = run(["scaling", "--data", DATA, "--warehouse", str(tmp_path / "wh"), "--train-sizes", sizes])
    assert result.exit_code == 2
    assert "--train-sizes" in result.stderr
    assert not (tmp_path / "wh").exists()


def test_cli_train_sizes_with_train_limit_is_usage_error(tmp_path):
    result = run(["scaling", "--data", DATA, "--warehouse", str(tmp_path / "wh"), "--train-sizes", "10",
                  "--train-limit", "20"])
    assert result.exit_code == 2


def test_cli_writes_json_and_svg_and_prints_only_the_table(tmp_path):
    out = tmp_path / "out"
    result = run(["scaling", "--data", DATA, "--preset", "seed", "--max-completion-tokens", "160",
                  "--train-sizes", "21,10", "--warehouse", str(tmp_path / "wh"), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    points = json.loads((out / "scaling.json").read_text())
    assert [p["rows"] for p in points] == [10, 21]
    assert result.stdout == scaling_table(points) + "\n"
    assert "wrote" in result.stderr
    ET.fromstring((out / "scaling.svg").read_text(encoding="utf-8"))


def test_an_output_path_that_cannot_be_a_directory_fails_before_the_curve(tmp_path):
    """`scaling --out` under a file ran every size and recorded their runs, then failed."""
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, ["scaling", "--data", DATA, "--train-sizes", "10,20",
                                       "--out", str(tmp_path / "afile" / "sub"), "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1 and "afile" in result.output and result.output.count("\n") == 1, result.output
    assert not (tmp_path / "wh").exists()  # nothing run


def test_a_size_whose_tables_were_built_is_marked_warm(tmp_path):
    """scaling in a warehouse that already held a size's tables timed that point warm (0.3 s
    against 0.7 s cold, in a helper's review) and said nothing; the point now names the stages
    it reused and the table marks its time."""
    warehouse = tmp_path / "wh"
    cfg = dataclasses.replace(CFG, train_limit=10)
    run_all(cfg, warehouse, DATA)
    points = scaling_curve(cfg, RunInputs(warehouse, DATA), sizes=(10, 20))
    assert points[0]["reused_stages"] == ["ngram_tables", "candidates"] and points[1]["reused_stages"] == []
    table = scaling_table(points).splitlines()
    assert table[2].endswith("*") and not table[3].endswith("*")
    assert table[-1].startswith("* warm: this warehouse held the size's tables already")
