"""`specdraft bench`: per-stage peak memory, the cost curve, the comparison's per-stage table.

No timing assertions: wall times are only checked to be recorded, never compared.
"""

from __future__ import annotations

import itertools
import json
import resource
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.measure.bench import DEFAULT_PEER_BUILD, DEFAULT_REFERENCE, format_stages
from specdraft.measure.timer import RssSampler, StageTimer, current_rss_bytes, peak_rss_bytes
from specdraft.pipeline import TIMED_STAGES as STAGES

from .conftest import FIXTURES

MB = 1_000_000
FIXTURE = FIXTURES / "parity_traces.parquet"
# The flags of tests/fixtures/parity_reference.json.
FIXTURE_FLAGS = ["--max-completion-tokens", "160"]


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="samples VmRSS in /proc")
def test_stage_peak_is_the_stage_own_and_the_process_peak_stays():
    timer = StageTimer()
    with timer.stage("allocates"):
        block = np.ones(300 * MB // 8)  # 300 MB, every page written, held to the stage's end
        assert block.sum() == block.size
    del block
    with timer.stage("allocates_nothing"):
        pass
    peaks = timer.peak_rss_bytes
    assert peaks["allocates"] - peaks["allocates_nothing"] >= 250 * MB
    # nothing resets the kernel's high-water mark: what a parent or getrusage reads keeps the peak
    # (within the few hundred KB by which the kernel's per-CPU counters let VmRSS run ahead of it)
    assert peak_rss_bytes() >= peaks["allocates"] - 4 * MB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 >= peaks["allocates"] - 4 * MB
    assert set(timer.seconds) == set(peaks)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="samples VmRSS in /proc")
def test_the_sampler_sees_a_peak_freed_before_the_stage_ends():
    """Memory allocated and freed inside a stage counts: the sampling thread reads it while it is
    resident (the test waits for its reading, up to 10 s, rather than for a fixed time)."""
    with RssSampler(interval=0.002) as sampler:
        before = sampler.peak
        block = np.ones(200 * MB // 8)
        assert block.sum() == block.size
        deadline = time.monotonic() + 10
        while sampler.peak < before + 150 * MB and time.monotonic() < deadline:
            threading.Event().wait(0.005)
        del block
        after = current_rss_bytes()
    assert sampler.peak >= before + 150 * MB > after


# A known allocation, made in a fresh child process so that no earlier test's peak hides it.
ALLOCATE = 200 * MB
ALLOCATING_CHILD = "import sys; import numpy as np; block = np.ones(int(sys.argv[1]) // 8); assert block.sum() == block.size"


def test_measure_reports_the_childs_peak():
    """bench.measure reads the peak of a child from outside (getrusage in its wrapper): a child that
    writes 200 MB more than an otherwise identical one peaks 200 MB higher."""
    from specdraft.measure.bench import measure

    idle = measure([sys.executable, "-c", ALLOCATING_CHILD, "0"])
    busy = measure([sys.executable, "-c", ALLOCATING_CHILD, str(ALLOCATE)])
    assert idle["returncode"] == busy["returncode"] == 0 and busy["wall_s"] > 0
    assert ALLOCATE <= busy["peak_rss_bytes"] < ALLOCATE + idle["peak_rss_bytes"] + 20 * MB
    assert 0.95 * ALLOCATE <= busy["peak_rss_bytes"] - idle["peak_rss_bytes"] <= 1.05 * ALLOCATE


FALLBACK_CHILD = """
import json, resource, sys
import numpy as np
from specdraft.measure import timer as measure_timer

def no_proc(path, *args, **kwargs):
    raise OSError(f"{path}: not here")

def resident():  # read here, past the patch below, which hides /proc from specdraft.measure.timer only
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

measure_timer.open = no_proc  # no /proc: peaks come from ru_maxrss
timer = measure_timer.StageTimer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with timer.stage("only"):
    resident_at_start = resident()
    block = np.ones(int(sys.argv[1]) // 8)
    assert block.sum() == block.size
    del block
print(json.dumps({"before": before, "resident_at_start": resident_at_start, "only": timer.peak_rss_bytes["only"]}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the child's resident memory in /proc")
def test_stage_peak_without_proc_falls_back_to_the_process_peak():
    """Without /proc the stage's peak is ru_maxrss, the process's peak so far: in a fresh process
    it is what was resident when the stage began plus what the stage allocated.

    The child runs under bench.measure's small wrapper: on Linux a process starts with its parent's
    peak (ru_maxrss survives fork and exec), and this test process may have peaked far higher."""
    from specdraft.measure.bench import measure

    child = measure([sys.executable, "-c", FALLBACK_CHILD, str(ALLOCATE)])
    assert child["returncode"] == 0, child["stderr"]
    peaks = json.loads(child["stdout"])
    assert peaks["only"] > peaks["before"]  # the stage's own allocation, not an earlier peak
    assert 0.95 * ALLOCATE <= peaks["only"] - peaks["resident_at_start"] <= 1.05 * ALLOCATE


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
    # the ratios are against the smallest scale (their arithmetic: test_cost_curve_on_known_measurements)
    assert points[0]["positions_ratio"] == points[0]["time_ratio"] == points[0]["memory_ratio"] == 1
    for p in points:
        assert p["wall_s"] > 0 and p["peak_rss_bytes"] > 0
        assert set(STAGES) <= set(p["stages_s"])
        assert set(p["stages_peak_rss_bytes"]) == set(p["stages_s"])
        # the process peak covers every stage's, though each stage reset the kernel's
        assert p["peak_rss_bytes"] >= max(p["stages_peak_rss_bytes"].values())
    # the growth exponents are the log-log least-squares slopes, as numpy's polyfit finds them
    log_positions = np.log([p["positions"] for p in points])
    for key, measured in (("time_exponent", "wall_s"), ("memory_exponent", "peak_rss_bytes")):
        slope = np.polyfit(log_positions, np.log([p[measured] for p in points]), 1)[0]
        assert curve["growth"][key] == pytest.approx(slope, abs=1e-9)


def test_exponent_of_known_growth():
    from specdraft.measure.bench import _exponent

    xs = [1_000, 2_000, 4_000, 8_000]
    assert _exponent(xs, [3 * x for x in xs]) == pytest.approx(1, abs=1e-12)  # linear
    assert _exponent(xs, [x * x / 7 for x in xs]) == pytest.approx(2, abs=1e-12)  # quadratic
    assert _exponent(xs, [5.0] * 4) == pytest.approx(0, abs=1e-12)  # flat
    assert _exponent([10, 40], [2, 4]) == pytest.approx(0.5, abs=1e-12)  # square root
    # least squares over every point, not the slope between the ends (that would be 1 here):
    # log2 y = 0, 0, 0, 3 at log2 x = 0, 1, 2, 3 gives 4.5 / 5
    assert _exponent([1, 2, 4, 8], [1, 1, 1, 8]) == pytest.approx(0.9, abs=1e-12)
    assert _exponent([5, 5], [1, 2]) is None  # one x: no slope


def test_cost_curve_on_known_measurements(monkeypatch):
    """cost_curve's arithmetic on made-up measurements, the answers worked out by hand: time grows
    linearly with positions, memory quadratically, the evaluate stage not at all."""
    from specdraft.measure import bench

    def fake_run(data, flags, memory_limit, preset):
        k = flags["train_limit"] // 10  # 1, 2, 4
        run = {"wall_s": 3.0 * k, "peak_rss_bytes": 100 * MB * k * k}
        results = {"exact_positions_added": 1000 * k, "backoff_positions_added": 900 * k, "train_examples": 10 * k,
                   "timings_s": {"ngram_tables": 2.0 * k, "evaluate": 0.5, "report": 0.0},
                   "peak_rss_bytes_by_stage": {"ngram_tables": 50 * MB * k}}
        return run, results

    monkeypatch.setattr(bench, "run_specdraft", fake_run)
    curve = bench.cost_curve(FIXTURE, 10, (1, 2, 4), {}, None)
    points = curve["points"]
    assert [p["positions"] for p in points] == [1000, 2000, 4000]
    assert [p["positions_ratio"] for p in points] == [1, 2, 4]
    assert [p["time_ratio"] for p in points] == [1, 2, 4]
    assert [p["memory_ratio"] for p in points] == [1, 4, 16]
    assert [p["seconds_per_million_positions"] for p in points] == pytest.approx([3000, 3000, 3000])
    growth = curve["growth"]
    assert growth["time_exponent"] == pytest.approx(1, abs=1e-12)
    assert growth["memory_exponent"] == pytest.approx(2, abs=1e-12)
    # a stage that took 0.000 s somewhere has no slope
    assert growth["stage_time_exponents"] == pytest.approx({"ngram_tables": 1, "evaluate": 0}, abs=1e-12)
    assert curve["flags"] == {"max_index_positions": 0, "backoff_max_index_positions": 0}


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
    ["--cost-curve", "--base-rows", "5", "--repeat", "2"],  # repeats are for the comparison
    ["--cost-curve", "--base-rows", "5", "--reference", __file__],  # and the reference (it was ignored)
    ["--repeat", "0"],
])
def test_cost_curve_usage_errors(args):
    assert run(["bench", "--data", str(FIXTURE), *args]).exit_code == 2


def test_stage_table_in_pipeline_order():
    seconds = {"total": 3.0, "calibrate": 0.5, "ingest": 1.0, "evaluate": 0.25, "candidates": 0.75,
               "ngram_tables": 0.5}
    peaks = {stage: (i + 1) * 1024**3 for i, stage in enumerate(sorted(seconds))}
    lines = format_stages({"specdraft": (seconds, peaks)}).splitlines()
    assert lines[0].split() == ["stage", "wall", "s", "peak", "GiB"]
    assert [line.split()[0] for line in lines[1:]] == [*STAGES, "total"]
    for line in lines[1:]:
        stage, wall, peak = line.split()
        assert float(wall) == seconds[stage] and float(peak) == peaks[stage] / 1024**3


def test_stage_table_of_both_presets():
    """With the peer, both presets run: each stage's line holds the seed preset's wall time and
    peak, then the default preset's, '-' where a preset has no such stage (the seed's calibrate is
    instant, but say it were missing) or no peak."""
    seed = ({"ingest": 1.0, "ngram_tables": 4.5, "candidates": 2.25, "evaluate": 0.5, "total": 8.75},
            {"ingest": 0.5 * 1024**3, "total": 0.75 * 1024**3})
    default = ({"ingest": 1.25, "ngram_tables": 4.75, "candidates": 5.5, "calibrate": 2.0, "evaluate": 2.25,
                "total": 16.0}, {"candidates": 1024**3, "total": 1024**3})
    lines = format_stages({"seed": seed, "default": default}).splitlines()
    assert lines[0].split() == ["stage", "seed", "wall", "s", "seed", "peak", "GiB",
                                "default", "wall", "s", "default", "peak", "GiB"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert list(rows) == [*STAGES, "total"]
    assert rows["calibrate"] == ["-", "-", "2.00", "-"]
    assert rows["candidates"] == ["2.25", "-", "5.50", "1.00"]
    assert rows["total"] == ["8.75", "0.75", "16.00", "1.00"]


@pytest.mark.skipif(not DEFAULT_REFERENCE.exists(), reason="needs ../shared/tools/reference_metrics.py")
def test_comparison_prints_stages_and_parity():
    """With --repeat 2 specdraft runs twice: its wall time and peak are the median (here the mean)
    of the two runs it lists, every stage's too, and the speedup is taken from that median."""
    result = run(["bench", "--data", str(FIXTURE), "--max-index-positions", "5000",
                  "--backoff-max-index-positions", "6000", "--repeat", "2", "--json", *FIXTURE_FLAGS])
    assert result.exit_code == 0, result.stderr
    bench = json.loads(result.stdout)
    assert all(bench["parity"].values())
    ours = bench["specdraft"]
    assert set(STAGES) <= set(ours["stages_peak_rss_bytes"]) and "total" in ours["stages_s"]
    assert ours["peak_rss_bytes"] >= max(ours["stages_peak_rss_bytes"].values())
    assert bench["repeat"] == 2 and len(ours["wall_s_runs"]) == len(ours["peak_rss_bytes_runs"]) == 2
    assert ours["wall_s"] == sum(ours["wall_s_runs"]) / 2
    assert ours["peak_rss_bytes"] == sum(ours["peak_rss_bytes_runs"]) / 2
    assert bench["speedup"] == bench["reference"]["wall_s"] / ours["wall_s"]
    # results.json is written before the report page and the exit (and after the process starts)
    assert len(ours["results_s_runs"]) == 2 and all(0 < s < wall + 1 for s, wall in zip(ours["results_s_runs"],
                                                                                    ours["wall_s_runs"]))


def _side(wall_s, peak_gib, avg_accepted=2.5, **more):
    return {"wall_s": wall_s, "peak_rss_bytes": peak_gib * 1024**3, "avg_accepted": avg_accepted, "positions": 10,
            "decode_step": 1.0, "stages_s": {"ingest": wall_s / 2, "total": wall_s}, **more}


def test_repeated_runs_report_the_median_and_range():
    """Three runs of a side: the table shows the middle wall time and peak, the fastest to slowest
    and lowest to highest beside them, and each stage's median."""
    from specdraft.measure.bench import format_bench, repeated_side

    ours = repeated_side([_side(21.0, 0.9, results_s=22.0), _side(19.0, 1.1, results_s=18.5),
                          _side(25.0, 1.0, results_s=20.0)])
    assert ours["wall_s"] == 21.0 and ours["peak_rss_bytes"] == 1.0 * 1024**3 and ours["results_s"] == 20.0
    assert ours["stages_s"] == {"ingest": 10.5, "total": 21.0}
    reference = _side(170.0, 12.0)
    result = {"data": "d.parquet", "flags": {"train_limit": 5}, "repeat": 3, "reference": reference,
              "specdraft": ours, "speedup": 170 / 21, "memory_ratio": 1 / 12, "parity": {"selected": True}}
    lines = format_bench(result).splitlines()
    row = next(line for line in lines if line.startswith("specdraft   "))
    assert row.split() == ["specdraft", "21.0", "20.0", "1.00", "2.5000", "1.0000", "19.0-25.0", "0.90-1.10"]
    # the reference: one run, no range, and no results.json of ours
    assert next(line for line in lines if line.startswith("reference")).split() == [
        "reference", "170.0", "-", "12.00", "2.5000", "1.0000"]
    assert "the median of 3 runs" in lines[2]


def test_parity_holds_for_every_repeated_run(monkeypatch, tmp_path):
    """With --repeat, each seed run's histograms are compared with the reference's: a run whose
    histogram differs (with the same mean, so the runs' figures agree) is a parity failure."""
    from specdraft.measure import bench

    histograms = iter([{"0": 2, "1": 2}, {"0": 3, "2": 1}])  # both average 0.5; the first differs

    def fake_run(data, flags, memory_limit, preset="seed"):
        figures = {"avg_accepted": 0.5, "positions": 4, "histogram": next(histograms)}
        return {"wall_s": 1.0, "peak_rss_bytes": MB}, {
            "selected": figures, "oracle_best": figures, "decode_step": figures, "timings_s": {"total": 1.0}}

    monkeypatch.setattr(bench, "run_specdraft", fake_run)
    reference = tmp_path / "reference.py"
    figures = {"avg_accepted": 0.5, "positions": 4, "histogram": {"0": 3, "2": 1}}
    reference.write_text("import json\nprint(json.dumps(" + repr(
        {"every_position": figures, "oracle_best": figures, "decode_step_causal": figures}) + "))\n")
    result = bench.run_bench(FIXTURE, {}, reference, None, repeat=2)
    assert result["parity"] == {"selected": False, "oracle_best": False, "decode_step": False}


def test_repeated_runs_must_agree():
    """Runs of the same side that score differently are an error, not a median."""
    from specdraft.errors import SpecdraftError
    from specdraft.measure.bench import repeated_side

    with pytest.raises(SpecdraftError, match="avg_accepted"):
        repeated_side([_side(20.0, 1.0), _side(20.0, 1.0, avg_accepted=2.4)])


@pytest.mark.skipif(not (DEFAULT_REFERENCE.exists() and (DEFAULT_PEER_BUILD / "venv").exists()),
                    reason="needs ../shared/tools/ and the peer built in ../peer-build (build_peer.sh)")
def test_comparison_with_the_peer(tmp_path):
    """--peer runs the default preset and SuffixDecoding on the same data and limits: every side
    scores the same eval positions (the response cut reached the peer), and the default preset's
    figures are those of a run of it."""
    result = run(["bench", "--data", str(FIXTURE), "--max-index-positions", "5000",
                  "--backoff-max-index-positions", "6000", "--peer", str(DEFAULT_PEER_BUILD), "--json", *FIXTURE_FLAGS])
    assert result.exit_code == 0, result.stderr
    bench = json.loads(result.stdout)
    sides = [bench[name] for name in ("reference", "specdraft", "specdraft_default", "peer")]
    assert len({side["positions"] for side in sides}) == 1
    assert 0 < bench["peer"]["avg_accepted"] <= 16 and bench["peer"]["config"] == "d96_f16_p0"
    out = tmp_path / "out"
    assert run(["run", "--data", str(FIXTURE), "--warehouse", str(tmp_path / "wh"), "--out", str(out),
                "--max-index-positions", "5000", "--backoff-max-index-positions", "6000", *FIXTURE_FLAGS]).exit_code == 0
    ours = json.loads((out / "results.json").read_text())
    assert bench["specdraft_default"]["avg_accepted"] == ours["selected"]["avg_accepted"]
    assert bench["specdraft_default"]["decode_step"] == ours["decode_step"]["avg_accepted"]
    text = run(["bench", "--data", str(FIXTURE), "--peer", str(DEFAULT_PEER_BUILD), "--cost-curve",
                "--base-rows", "10"])
    assert text.exit_code != 0 and "--peer is for the comparison" in text.output


def test_a_peer_directory_without_the_build_is_named(tmp_path):
    """An unbuilt --peer directory: one line naming what is missing and how to build it. (Any
    existing --reference file passes the check before it: a clone without ../shared has none.)"""
    result = CliRunner().invoke(main, ["bench", "--data", str(FIXTURE), "--peer", str(tmp_path),
                                       "--reference", __file__, *FIXTURE_FLAGS])
    assert result.exit_code != 0
    assert f"{tmp_path / 'venv' / 'bin' / 'python'}: not found" in result.output
    assert "build_peer.sh" in result.output


def test_comparison_with_the_peer_tables_both_presets_stages():
    """format_bench with the peer: the stage table has the seed and default presets' columns,
    each from its own side (the default preset's stages are not the seed's)."""
    from specdraft.measure.bench import format_bench

    seed = _side(9.0, 0.9, stages_peak_rss_bytes={"ingest": 0.5 * 1024**3})
    default = _side(16.0, 1.0, stages_peak_rss_bytes={"ingest": 0.75 * 1024**3})
    result = {"data": "d.parquet", "flags": {"train_limit": 5}, "repeat": 1, "reference": _side(170.0, 12.0),
              "specdraft": seed, "specdraft_default": default, "peer": _side(18.0, 1.04, config="d96_f16_p0"),
              "speedup": 170 / 9, "memory_ratio": 0.9 / 12, "parity": {"selected": True}}
    lines = format_bench(result).splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("stage")):]
    assert table[0].split()[1] == "seed" and table[0].split()[7] == "default"
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["ingest"] == ["4.50", "0.50", "8.00", "0.75"]
    assert rows["total"] == ["9.00", "-", "16.00", "-"]


CONCURRENT_CHILDREN = """
import subprocess, sys
child = "import sys, time, numpy as np; block = np.ones(int(sys.argv[1]) // 8); print(block.size, flush=True); time.sleep(1)"
kids = [subprocess.Popen([sys.executable, "-c", child, sys.argv[1]], stdout=subprocess.PIPE) for _ in range(2)]
assert all(kid.stdout.readline() for kid in kids)  # both hold their block (for a second: 50 samples)
assert all(kid.wait() == 0 for kid in kids)
"""


def test_measure_sums_the_process_trees_memory():
    """bench.measure's peak is the process tree's, sampled from outside: two children that each
    hold 200 MB at once peak above 400 MB. getrusage in the wrapper, which it was, gives the
    largest single process's high-water mark: about 200 MB."""
    from specdraft.measure.bench import measure

    tree = measure([sys.executable, "-c", CONCURRENT_CHILDREN, str(ALLOCATE)])
    assert tree["returncode"] == 0, tree["stderr"]
    assert tree["largest_process_peak_rss_bytes"] < 2 * ALLOCATE
    assert tree["peak_rss_bytes"] == tree["tree_peak_rss_bytes"] >= 2 * ALLOCATE


def _fake_reference(path: Path) -> Path:
    figures = {"avg_accepted": 0.0, "positions": 1, "histogram": {"0": 1}}
    path.write_text("import json\nprint(json.dumps(" + repr(
        {"every_position": figures, "oracle_best": figures, "decode_step_causal": figures}) + "))\n")
    return path


def test_a_parity_failure_fails_the_bench(tmp_path):
    """A reference whose histograms differ from specdraft's printed 'NO' and exited 0, so a script
    or CI running the bench passed; it now exits 1 after the table, naming the histograms."""
    result = run(["bench", "--data", str(FIXTURE), "--reference", str(_fake_reference(tmp_path / "ref.py")),
                  "--max-index-positions", "5000", "--backoff-max-index-positions", "6000", *FIXTURE_FLAGS])
    assert result.exit_code == 1
    assert "parity (histograms equal): selected NO, oracle_best NO, decode_step NO" in result.stdout
    assert result.stderr.strip().endswith("parity failed: the selected, oracle_best, decode_step histograms "
                                          "differ from the reference's"), result.stderr


def test_a_cost_curve_output_under_a_file_fails_before_the_curve(tmp_path):
    """`bench --cost-curve --out` under a file ran every point, printed the table, then failed."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    result = run(["bench", "--cost-curve", "--data", str(FIXTURE), "--base-rows", "10", "--scales", "1",
                  "--out", str(a_file / "curve")])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"specdraft: error: {a_file}: Not a directory\n"


def test_a_stopped_bench_stops_its_run_and_leaves_nothing(tmp_path):
    """SIGTERM (or Ctrl-C) to the bench alone ended its wrapper, but the run it measured went on,
    orphaned, and wrote its temporary warehouse again after the bench's cleanup. The bench now
    passes the signal on and waits: when it has exited, no process of the run is left, nor its
    folders."""
    import os
    import signal
    import subprocess

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    bench = subprocess.Popen([sys.executable, "-m", "specdraft.cli", "bench", "--data", str(FIXTURE),
                              "--reference", str(_fake_reference(tmp_path / "ref.py")), *FIXTURE_FLAGS],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # the run has started once its warehouse is there (DuckDB made its file)
        while not list(tmp_path.glob("specdraft-bench-*/warehouse/specdraft.duckdb")):
            assert bench.poll() is None, bench.stderr.read()
            time.sleep(0.01)  # (polling, not timing: leave the run its cores)
        bench.send_signal(signal.SIGTERM)
        exit_code = bench.wait(timeout=120)
    finally:
        bench.kill()
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_mentions(pid, str(tmp_path))]
    assert left == [] and list(tmp_path.glob("specdraft-bench-*")) == []
    assert exit_code == 128 + signal.SIGTERM


def _cmdline_mentions(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


def test_the_bench_commands_sigterm_handler_is_its_own():
    """bench turns SIGTERM into SystemExit for its run; the handler outlived the command in the
    process that ran it (a test process), where a later tokenizer pool's workers inherited it and
    one hung the pool's exit (a CI run stuck in test_a_million_token_trace)."""
    import signal

    from click.testing import CliRunner

    from specdraft.cli import main

    before = signal.getsignal(signal.SIGTERM)
    here = str(Path(__file__).parent)
    result = CliRunner().invoke(main, ["bench", "--data", __file__, "--cost-curve", "--peer", here])
    assert result.exit_code == 2 and "--peer is for the comparison" in result.output
    assert signal.getsignal(signal.SIGTERM) is before
