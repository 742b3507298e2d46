"""`specdraft bench`: per-stage peak memory, the cost curve, the comparison's per-stage table.

No timing assertions: wall times are only checked to be recorded, never compared.
"""

from __future__ import annotations

import itertools
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from specdraft import pipeline
from specdraft.bench import DEFAULT_REFERENCE, format_stages
from specdraft.cli import main
from specdraft.pipeline import STAGES, StageTimer, reset_peak_rss

from .conftest import FIXTURES

MB = 1_000_000
FIXTURE = FIXTURES / "parity_traces.parquet"
# The flags of tests/fixtures/parity_reference.json.
FIXTURE_FLAGS = ["--max-completion-tokens", "160"]


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.skipif(not reset_peak_rss(), reason="/proc/self/clear_refs is not writable here")
def test_stage_peak_is_the_stage_own():
    timer = StageTimer()
    with timer.stage("allocates"):
        block = np.ones(300 * MB // 8)  # 300 MB, every page written
        assert block.sum() == block.size
        del block
    with timer.stage("allocates_nothing"):
        pass
    peaks = timer.peak_rss_bytes
    assert peaks["allocates"] - peaks["allocates_nothing"] >= 250 * MB
    # the reset hides the first stage's peak from the kernel's counters, not from the timer's
    assert timer.process_peak_rss_bytes >= peaks["allocates"]
    assert set(timer.seconds) == set(peaks)


def test_stage_peak_without_proc_falls_back_to_the_process_peak(monkeypatch):
    def no_proc(path, *args, **kwargs):
        raise OSError(f"{path}: not here")

    monkeypatch.setattr(pipeline, "open", no_proc, raising=False)
    assert not reset_peak_rss()
    timer = StageTimer()
    with timer.stage("only"):
        block = np.ones(50 * MB // 8)
        del block
    assert timer.peak_rss_bytes["only"] >= 50 * MB  # ru_maxrss: the process's peak so far


@pytest.fixture(scope="module")
def curve_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("curve")
    result = run(["bench", "--cost-curve", "--data", str(FIXTURE), "--base-rows", "5", "--scales", "4,1,2",
                  "--out", str(out), *FIXTURE_FLAGS])
    return result, out


def test_cost_curve_points_grow_with_scale(curve_run):
    result, out = curve_run
    assert result.exit_code == 0, result.stderr
    curve = json.loads((out / "cost_curve.json").read_text())
    points = curve["points"]
    assert [p["scale"] for p in points] == [1, 2, 4]
    assert [p["train_limit"] for p in points] == [5, 10, 20]
    assert curve["flags"]["max_index_positions"] == 0 and curve["flags"]["backoff_max_index_positions"] == 0
    for before, after in itertools.pairwise(points):
        assert after["train_rows"] > before["train_rows"]
        assert after["positions"] > before["positions"]
        assert after["backoff_positions"] > before["backoff_positions"]
    first = points[0]
    for p in points:
        assert p["wall_s"] > 0 and p["peak_rss_bytes"] > 0
        assert p["positions_ratio"] == pytest.approx(p["positions"] / first["positions"])
        assert p["time_ratio"] == pytest.approx(p["wall_s"] / first["wall_s"])
        assert p["memory_ratio"] == pytest.approx(p["peak_rss_bytes"] / first["peak_rss_bytes"])
        assert p["seconds_per_million_positions"] == pytest.approx(p["wall_s"] / p["positions"] * 1e6)
        assert set(STAGES) <= set(p["stages_s"])
        assert set(p["stages_peak_rss_bytes"]) == set(p["stages_s"])
        # the process peak covers every stage's, though each stage reset the kernel's
        assert p["peak_rss_bytes"] >= max(p["stages_peak_rss_bytes"].values())
    assert math.isfinite(curve["growth"]["time_exponent"])
    assert math.isfinite(curve["growth"]["memory_exponent"])


def test_cost_curve_table_and_chart(curve_run):
    result, out = curve_run
    curve = json.loads((out / "cost_curve.json").read_text())
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.strip()}
    for p in curve["points"]:
        assert rows[f"{p['scale']}x"][1:3] == [str(p["train_rows"]), str(p["positions"])]
    for stage in STAGES:
        assert stage in rows
    assert "wrote" not in result.stdout  # stdout is data only
    svg = ET.parse(out / "cost_curve.svg").getroot()
    series = {g.get("data-series") for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("data-series")}
    assert series == {"wall_time", "peak_memory", "linear"}


def test_cost_curve_json_on_stdout(tmp_path):
    result = run(["bench", "--cost-curve", "--data", str(FIXTURE), "--train-limit", "3", "--scales", "1",
                  "--json", *FIXTURE_FLAGS])
    assert result.exit_code == 0, result.stderr
    (point,) = json.loads(result.stdout)["points"]
    assert point["train_limit"] == 3 and point["positions"] > 0


@pytest.mark.parametrize("args", [
    ["--cost-curve"],  # no base rows
    ["--cost-curve", "--base-rows", "5", "--train-limit", "5"],
    ["--cost-curve", "--base-rows", "5", "--scales", "0,2"],
    ["--cost-curve", "--base-rows", "5", "--scales", "1,x"],
    ["--base-rows", "5"],  # curve options without --cost-curve
    ["--scales", "1,2"],
])
def test_cost_curve_usage_errors(args):
    assert run(["bench", "--data", str(FIXTURE), *args]).exit_code == 2


def test_stage_table_in_pipeline_order():
    seconds = {"total": 3.0, "calibrate": 0.5, "ingest": 1.0, "evaluate": 0.25, "candidates": 0.75,
               "ngram_tables": 0.5}
    peaks = {stage: (i + 1) * 1024**3 for i, stage in enumerate(sorted(seconds))}
    lines = format_stages(seconds, peaks).splitlines()
    assert [line.split()[0] for line in lines[1:]] == [*STAGES, "total"]
    for line in lines[1:]:
        stage, wall, peak = line.split()
        assert float(wall) == seconds[stage] and float(peak) == peaks[stage] / 1024**3


@pytest.mark.skipif(not DEFAULT_REFERENCE.exists(), reason="needs ../shared/tools/reference_metrics.py")
def test_comparison_prints_stages_and_parity():
    result = run(["bench", "--data", str(FIXTURE), "--max-index-positions", "5000",
                  "--backoff-max-index-positions", "6000", "--json", *FIXTURE_FLAGS])
    assert result.exit_code == 0, result.stderr
    bench = json.loads(result.stdout)
    assert all(bench["parity"].values())
    ours = bench["specdraft"]
    assert set(STAGES) <= set(ours["stages_peak_rss_bytes"]) and "total" in ours["stages_s"]
    assert ours["peak_rss_bytes"] >= max(ours["stages_peak_rss_bytes"].values())
