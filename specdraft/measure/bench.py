"""Benchmark: the seed reference and specdraft on the same data, cold, with the ratios; and
specdraft's cost curve, how its time and memory grow with the indexed train positions.

Each run is its own process under a small wrapper (watch.py) that reports its wall time and
peak resident memory: the process tree's, sampled every 20 ms from outside (forked workers
included), or the kernel's high-water mark of its largest process if higher. specdraft runs end
to end (ingest to report) into a fresh warehouse, and its results.json gives each stage's wall
time and peak memory; the next run starts once its last snapshot copy for readers, which outlives
the process, is in. The every-position histograms of specdraft and the reference are compared,
and the bench fails (exit 1, after its table) where they differ.

specdraft runs first, so that it does not start in the wake of the reference's 12 GB (the page
cache that evicted is read again): specdraft run just after a process had touched and freed
12 GB took 27.8 s against 22.1 s without (ingest 4.0 s against 2.6 s, the n-gram tables 12.7 s
against 10.3 s). specdraft's own 0.9 GB is a twelfth of that.

On a shared machine one run's wall time says little: the development set's default preset took
20.0 to 23.5 s in runs of the same code within an hour (2026-12-06). `--repeat N` runs specdraft
(and with --peer the default preset and the peer) N times, taking turns (seed, default, peer,
seed, ...: a slow spell falls on every side), and reports each side's median wall time and
peak, with the range, and each stage's median. The reference runs once: it takes minutes, and
the ratios' error is specdraft's. Every run of a side must give the same figures (they are
deterministic); a run that differs fails the bench.

Besides the process's wall time, specdraft's runs report `results_s`: from before the process
started to when results.json was written (its modification time), the measure issue 14 states
its targets in; the report page and the process's exit follow it (about a second on the
development set).

    specdraft bench --data ../shared/data/qwen25-math-rollouts.parquet --train-limit 6988
    specdraft bench --cost-curve --data ../shared/data/qwen25-math-rollouts.parquet --base-rows 3000
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specdraft import files
from specdraft.errors import SpecdraftError
from specdraft.progress import say
from specdraft.report.charts import text_table

DEFAULT_REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "tools" / "reference_metrics.py"
# The peer, SuffixDecoding (arctic-inference's C++ suffix trees), scored with the seed's protocol:
# its script, the directory its build_peer.sh makes (venv/ and pkg/), and its best setting for
# 16-token drafts (the script's README)
DEFAULT_PEER_SCRIPT = DEFAULT_REFERENCE.parent / "peer" / "peer_suffix.py"
DEFAULT_PEER_BUILD = DEFAULT_REFERENCE.parents[2] / "peer-build"
PEER_CONFIG = "d96_f16_p0"
GIB = 1024**3


def measure(command: list[str]) -> dict:
    """Run `command` under a fresh wrapper process (watch.py); return its wall time, peak RSS
    (the process tree's), exit code and output, and `started_at`, the wall-clock time it started.
    Interrupted (Ctrl-C) or stopped (SIGTERM, which the CLI turns into SystemExit), the bench
    passes the signal to the wrapper, which passes it on, and waits for both: no run goes on
    without it (the wrapper ended by its parent's exception used to leave its child running)."""
    # a session of its own: a terminal's Ctrl-C reaches the bench alone, which passes it on once
    wrapper = subprocess.Popen([sys.executable, "-m", "specdraft.measure.watch", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = wrapper.communicate()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            wrapper.send_signal(signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM)
        wrapper.communicate()
        raise
    if wrapper.returncode != 0:
        raise SpecdraftError(f"the bench's wrapper failed ({wrapper.returncode}):\n{stderr[-4000:]}")
    return json.loads(stdout)


def _flags(options: dict) -> list[str]:
    out: list[str] = []
    for key, value in options.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out



def run_specdraft(data: Path, flags: dict, memory_limit: str | None, preset: str = "seed") -> tuple[dict, dict]:
    """`specdraft run` cold, in its own process and a fresh warehouse: (measurement, results.json)."""
    with tempfile.TemporaryDirectory(prefix="specdraft-bench-") as tmp:
        command = [sys.executable, "-m", "specdraft.cli", "run", "--data", str(data),
                   "--warehouse", str(Path(tmp) / "warehouse"), "--out", str(Path(tmp) / "out"),
                   "--preset", preset, *_flags(flags)]
        if memory_limit:
            command += ["--memory-limit", memory_limit]
        try:
            run = measure(command)
        finally:
            _wait_for_snapshot_copy(Path(tmp) / "warehouse")
        if run["returncode"] != 0:
            raise SpecdraftError(f"specdraft failed:\n{run['stderr']}")
        path = Path(tmp) / "out" / "results.json"
        # from just before the process started to when results.json was written (the report page
        # and the process's exit come after it)
        run["results_s"] = path.stat().st_mtime - run["started_at"]
        results = json.loads(path.read_text())
    # the wrapper's peak (the tree's, or its largest process's high-water mark) is at or above the
    # run's own sampled maximum (10 ms readings), which is taken where neither can be read
    run["peak_rss_bytes"] = max(run["peak_rss_bytes"], results.get("peak_rss_bytes_by_stage", {}).get("total", 0))
    return run, results


def _wait_for_snapshot_copy(warehouse: Path) -> None:
    """Until the run's last copy of its warehouse for readers is in: a process of its own that
    outlives the run and holds the writer's lock until done (snapshot.Copy), so that it neither
    runs into the next timed run nor finds its folder deleted under it."""
    from specdraft.warehouse.lock import LOCK_FILE, WriterLock

    if (warehouse / LOCK_FILE).exists():
        WriterLock(warehouse / LOCK_FILE).release()


def peer_python(build: Path, script: Path = DEFAULT_PEER_SCRIPT) -> Path:
    """The peer's interpreter in `build`, once its package and the script are there too."""
    python = build / "venv" / "bin" / "python"
    for needed in (python, build / "pkg", script):
        if not needed.exists():
            raise SpecdraftError(f"{needed}: not found; build the peer with ../shared/tools/peer/build_peer.sh "
                                 "and pass its directory as --peer")
    return python


def run_peer(data: Path, flags: dict, build: Path, script: Path = DEFAULT_PEER_SCRIPT) -> tuple[dict, dict]:
    """SuffixDecoding cold, in its own process, on the same data and the limits it takes (train,
    eval, response cut; it indexes every train token): (measurement, its JSON)."""
    python = peer_python(build, script)
    with tempfile.TemporaryDirectory(prefix="specdraft-peer-") as tmp:
        out = Path(tmp) / "peer.json"
        run = measure([str(python), str(script), str(data), "--dataset-name", data.stem, "--config", PEER_CONFIG,
                       "--train-limit", str(flags.get("train_limit", 0)), "--eval-limit", str(flags.get("eval_limit", 0)),
                       "--max-completion-tokens", str(flags.get("max_completion_tokens", 512)),
                       "--pkg-dir", str(build / "pkg"), "--out", str(out)])
        if run["returncode"] != 0:
            raise SpecdraftError(f"the peer failed:\n{run['stderr']}")
        return run, json.loads(out.read_text())


def _side(run: dict, every: dict, decode: dict, **more) -> dict:
    timed = {"results_s": run["results_s"]} if "results_s" in run else {}
    return {"wall_s": run["wall_s"], **timed, "peak_rss_bytes": run["peak_rss_bytes"],
            "avg_accepted": every["avg_accepted"], "positions": every["positions"],
            "decode_step": decode["avg_accepted"], **more}


def _stage_figures(results: dict) -> dict:
    """A run's stage seconds and peaks (STAGE_TIMINGS) from its results.json."""
    return {"stages_s": results["timings_s"], "stages_peak_rss_bytes": results.get("peak_rss_bytes_by_stage", {})}


# What varies from run to run of a side (repeated_side takes their medians); every other figure
# must be the same in every run
TIMINGS = ("wall_s", "results_s", "peak_rss_bytes")
STAGE_TIMINGS = ("stages_s", "stages_peak_rss_bytes")


def repeated_side(runs: list[dict]) -> dict:
    """One side's figures over its repeated runs (each a _side dict): the median wall time and
    peak (the mean of the middle two of an even count), every run's in wall_s_runs and
    peak_rss_bytes_runs, and each stage's median; the accepted figures, which every run must
    share.

    >>> side = repeated_side([{"wall_s": 3.0, "peak_rss_bytes": 5, "avg_accepted": 2.0, "stages_s": {"a": 1.0}},
    ...                       {"wall_s": 1.0, "peak_rss_bytes": 7, "avg_accepted": 2.0, "stages_s": {"a": 3.0}},
    ...                       {"wall_s": 2.0, "peak_rss_bytes": 6, "avg_accepted": 2.0, "stages_s": {"a": 2.0}}])
    >>> side["wall_s"], side["wall_s_runs"], side["peak_rss_bytes"], side["stages_s"]
    (2.0, [3.0, 1.0, 2.0], 6, {'a': 2.0})
    """
    first = runs[0]
    for run in runs[1:]:
        differ = [key for key in first if key not in (*TIMINGS, *STAGE_TIMINGS) and run.get(key) != first[key]]
        if differ:
            raise SpecdraftError(f"repeated runs differ in {', '.join(differ)}: {[r.get(differ[0]) for r in runs]}")
    side = dict(first)
    for key in TIMINGS:
        if key not in first:
            continue
        values = [run[key] for run in runs]
        side[key] = statistics.median(values)
        side[f"{key}_runs"] = values
    for key in STAGE_TIMINGS:
        if key in first:
            stages = {stage for run in runs for stage in run[key]}
            side[key] = {stage: statistics.median(run[key][stage] for run in runs if stage in run[key])
                         for stage in stages}
    return side


def run_bench(data: Path, seed_flags: dict, reference: Path, memory_limit: str | None,
              peer: Path | None = None, repeat: int = 1) -> dict:
    """specdraft --preset seed against the reference; with `peer` (the peer's build directory)
    also specdraft --preset default and SuffixDecoding, every program cold, specdraft first (see
    the module docstring); specdraft and the peer `repeat` times, in turns (repeated_side)."""
    if repeat < 1:
        raise SpecdraftError(f"--repeat must be at least 1, got {repeat}")
    if peer is not None:
        peer_python(peer)  # a missing peer fails before anything runs
    sides: dict[str, list[dict]] = {"specdraft": [], "specdraft_default": [], "peer": []}
    seed_results = []  # every seed run's results.json: each must equal the reference
    for round_ in range(1, repeat + 1):
        if repeat > 1:
            say(f"bench: round {round_} of {repeat}")
        ours_run, ours = run_specdraft(data, seed_flags, memory_limit)
        seed_results.append(ours)
        sides["specdraft"].append(_side(ours_run, ours["selected"], ours["decode_step"], **_stage_figures(ours)))
        if peer is not None:
            default_run, default = run_specdraft(data, seed_flags, memory_limit, preset="default")
            peer_run, suffix = run_peer(data, seed_flags, peer)
            sides["specdraft_default"].append(_side(default_run, default["selected"], default["decode_step"],
                                                    **_stage_figures(default)))
            sides["peer"].append(_side(peer_run, suffix["every_position"], suffix["decode_step"], config=PEER_CONFIG))
    result = {"data": str(data), "flags": seed_flags, "repeat": repeat}
    result.update((name, repeated_side(runs)) for name, runs in sides.items() if runs)
    reference_run = measure([sys.executable, str(reference), str(data), *_flags(seed_flags)])
    if reference_run["returncode"] != 0:
        raise SpecdraftError(f"reference failed:\n{reference_run['stderr']}")
    theirs = json.loads(reference_run["stdout"])
    pairs = (("selected", "every_position"), ("oracle_best", "oracle_best"), ("decode_step", "decode_step_causal"))
    parity = {
        ours_key: all({int(k): v for k, v in ours[ours_key]["histogram"].items()}
                      == {int(k): v for k, v in theirs[ref_key]["histogram"].items()} for ours in seed_results)
        for ours_key, ref_key in pairs
    }
    result["reference"] = _side(reference_run, theirs["every_position"], theirs["decode_step_causal"])
    result["speedup"] = reference_run["wall_s"] / result["specdraft"]["wall_s"]
    result["memory_ratio"] = result["specdraft"]["peak_rss_bytes"] / reference_run["peak_rss_bytes"]
    result["parity"] = parity
    return result


def _stage_order(stages) -> list[str]:
    """Pipeline order (results.json sorts its keys), then any others, total last."""
    from specdraft.pipeline import TIMED_STAGES

    known = [*TIMED_STAGES, "leave_one_out"]
    rest = sorted(s for s in stages if s not in known and s != "total")
    return [s for s in known if s in stages] + rest + (["total"] if "total" in stages else [])


def format_stages(columns: dict[str, tuple[dict, dict]]) -> str:
    """One line per stage: for each column (a run's name -> its stage seconds and peaks), the
    wall seconds and peak resident memory during the stage ('-' where that run has no figure).
    One column is headed by its figures' names alone, several by the run's name too."""
    named = len(columns) > 1
    width = max(len(name) for name in columns) + len(" peak GiB") + 1 if named else 10
    header = f"{'stage':16}"
    for name in columns:
        header += "".join(f"{(f'{name} ' if named else '') + what:>{width}}" for what in ("wall s", "peak GiB"))
    lines = [header]
    for stage in _stage_order({stage for seconds, _ in columns.values() for stage in seconds}):
        row = f"{stage:16}"
        for seconds, peaks in columns.values():
            row += f"{f'{seconds[stage]:.2f}' if stage in seconds else '-':>{width}}"
            row += f"{f'{peaks[stage] / GIB:.2f}' if stage in peaks else '-':>{width}}"
        lines.append(row)
    return "\n".join(lines)


def format_bench(result: dict) -> str:
    ref, ours = result["reference"], result["specdraft"]
    presets = [("specdraft", ours)]
    rows = [("reference", ref), *presets]
    if "peer" in result:
        presets = [("specdraft seed", ours), ("specdraft default", result["specdraft_default"])]
        rows = [("reference", ref), *presets, (f"SuffixDecoding ({result['peer']['config']})", result["peer"])]
    width = max(len(name) for name, _ in rows) + 2
    repeat = result.get("repeat", 1)
    repeats = (f"{'specdraft and the peer' if 'peer' in result else 'specdraft'}: the median of {repeat} runs "
               "each, taken in turns (range: fastest to slowest); the reference: one run")
    lines = [
        f"data: {result['data']}",
        f"flags: {' '.join(_flags(result['flags']))}",
        *([repeats] if repeat > 1 else []),
        f"{'':{width}}{'wall s':>10}{'results s':>11}{'peak GiB':>10}{'every position':>16}{'decode step':>13}"
        + (f"{'wall s range':>16}{'peak GiB range':>16}" if repeat > 1 else ""),
        *(f"{name:{width}}{side['wall_s']:10.1f}{_seconds(side.get('results_s')):>11}"
          f"{side['peak_rss_bytes'] / GIB:10.2f}{side['avg_accepted']:16.4f}{side['decode_step']:13.4f}"
          + _ranges(side) for name, side in rows),
        f"speedup {result['speedup']:.1f}x, memory {result['memory_ratio']:.2f} of the reference's",
    ]
    if "peer" in result:
        peer = result["peer"]
        for name, side in presets:
            lines.append(f"{name} against SuffixDecoding: {peer['wall_s'] / side['wall_s']:.2f}x its speed, "
                         f"{side['peak_rss_bytes'] / peer['peak_rss_bytes']:.2f} of its memory, "
                         f"{side['avg_accepted'] - peer['avg_accepted']:+.3f} accepted per position")
    lines += [
        "results s: from start to results.json written (specdraft's report page and exit follow it)",
        "parity (histograms equal): " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["parity"].items()),
        "",
        "specdraft by stage (total: in-process, without interpreter start)"
        + (f", the median of {repeat} runs:" if repeat > 1 else ":"),
        format_stages({name.removeprefix("specdraft "): (side["stages_s"], side.get("stages_peak_rss_bytes", {}))
                       for name, side in presets}),
    ]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ranges(side: dict) -> str:
    """A repeated side's fastest to slowest wall time and lowest to highest peak (blank for one run)."""
    if len(side.get("wall_s_runs", ())) < 2:
        return ""
    walls, peaks = side["wall_s_runs"], [peak / GIB for peak in side["peak_rss_bytes_runs"]]
    return f"{f'{min(walls):.1f}-{max(walls):.1f}':>16}{f'{min(peaks):.2f}-{max(peaks):.2f}':>16}"


def parse_scales(value: str) -> tuple[int, ...]:
    """Comma-separated positive multiples, sorted and deduplicated.

    >>> parse_scales("4,1,2,2")
    (1, 2, 4)
    """
    try:
        scales = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError as exc:
        raise SpecdraftError(f"scales must be comma-separated integers, got {value!r}") from exc
    if not scales or scales[0] < 1:
        raise SpecdraftError(f"scales must be integers >= 1, got {value!r}")
    return tuple(scales)


def _exponent(xs: list[float], ys: list[float]) -> float | None:
    """The least-squares slope of log y against log x: 1 is linear growth, 2 quadratic.

    >>> round(_exponent([1, 2, 4], [3, 6, 12]), 6)
    1.0
    """
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    spread = sum((x - mx) ** 2 for x in lx)
    if spread == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / spread


def cost_curve(data: Path, base_rows: int, scales: tuple[int, ...], flags: dict, memory_limit: str | None,
               preset: str = "seed") -> dict:
    """specdraft alone at base_rows x each scale train rows, each cold in its own process and
    warehouse; the index uncapped unless `flags` caps it.

    Each point: scale, train_limit, train_rows (after dropping empty responses), positions (train
    positions in the n-gram index) and backoff_positions, wall_s and peak_rss_bytes of the process,
    seconds_per_million_positions, each stage's seconds and peak, and positions_ratio, time_ratio and
    memory_ratio against the first (smallest) scale. `growth` fits time and memory against
    positions on log-log axes: an exponent of 1 is linear.
    """
    flags = {"max_index_positions": 0, "backoff_max_index_positions": 0, **flags}
    points = []
    for i, scale in enumerate(scales, 1):
        limit = base_rows * scale
        say(f"cost curve {i}/{len(scales)}: {scale}x, {limit} train rows")
        run, results = run_specdraft(data, {**flags, "train_limit": limit}, memory_limit, preset)
        positions = int(results["exact_positions_added"])
        wall = round(run["wall_s"], 3)
        points.append({
            "scale": scale,
            "train_limit": limit,
            "train_rows": int(results["train_examples"]),
            "positions": positions,
            "backoff_positions": int(results["backoff_positions_added"]),
            "wall_s": wall,
            "peak_rss_bytes": int(run["peak_rss_bytes"]),
            "seconds_per_million_positions": wall / positions * 1e6 if positions else None,
            **_stage_figures(results),
        })
        if len(points) > 1 and positions == points[-2]["positions"]:
            say(f"{scale}x indexes no more positions than the scale before it "
                f"(the train split has {points[-1]['train_rows']} usable rows)", always=True)
    first = points[0]
    for point in points:
        point["positions_ratio"] = point["positions"] / first["positions"] if first["positions"] else None
        point["time_ratio"] = point["wall_s"] / first["wall_s"]
        point["memory_ratio"] = point["peak_rss_bytes"] / first["peak_rss_bytes"]
    growth = {"time_exponent": None, "memory_exponent": None, "stage_time_exponents": {}}
    if all(p["positions"] for p in points):
        xs = [p["positions"] for p in points]
        growth["time_exponent"] = _exponent(xs, [p["wall_s"] for p in points])
        growth["memory_exponent"] = _exponent(xs, [p["peak_rss_bytes"] for p in points])
        for stage in _stage_order({s for p in points for s in p["stages_s"]}):
            seconds = [p["stages_s"].get(stage, 0) for p in points]
            if all(seconds):  # a stage of 0.000 s has no slope
                growth["stage_time_exponents"][stage] = _exponent(xs, seconds)
    return {"data": str(data), "preset": preset, "base_rows": base_rows, "scales": list(scales),
            "flags": flags, "memory_limit": memory_limit, "points": points, "growth": growth}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_cost_curve(curve: dict) -> str:
    """The curve as aligned text: one row per scale, then each stage's seconds (and peak) per scale."""
    header = ("scale", "train rows", "positions", "wall s", "peak GiB", "s/M pos", "positions x", "time x",
              "memory x")
    cells = [(f"{p['scale']}x", f"{p['train_rows']}", f"{p['positions']}", f"{p['wall_s']:.1f}",
              f"{p['peak_rss_bytes'] / GIB:.2f}",
              "-" if p["seconds_per_million_positions"] is None else f"{p['seconds_per_million_positions']:.2f}",
              _ratio(p["positions_ratio"]), _ratio(p["time_ratio"]), _ratio(p["memory_ratio"]))
             for p in curve["points"]]
    flags = {k: v for k, v in curve["flags"].items() if k != "train_limit"}
    lines = [f"data: {curve['data']}",
             f"preset {curve['preset']}, train rows {curve['base_rows']} x scale; {' '.join(_flags(flags))}",
             *text_table(header, cells)]
    growth = curve["growth"]
    if growth["time_exponent"] is not None:
        lines.append(f"growth with positions (log-log slope, 1 = linear): time {growth['time_exponent']:.2f}, "
                     f"memory {growth['memory_exponent']:.2f}")
    stages = _stage_order({s for p in curve["points"] for s in p["stages_s"]})
    slopes = growth.get("stage_time_exponents", {})
    lines += ["", "by stage, wall s (peak GiB), and the slope of its time against positions:",
              f"{'stage':16}" + "".join(f"{str(p['scale']) + 'x':>16}" for p in curve["points"]) + f"{'slope':>8}"]
    for stage in stages:
        row = f"{stage:16}"
        for p in curve["points"]:
            seconds, peak = p["stages_s"].get(stage), p["stages_peak_rss_bytes"].get(stage)
            text = "-" if seconds is None else f"{seconds:.1f}" + ("" if peak is None else f" ({peak / GIB:.2f})")
            row += f"{text:>16}"
        lines.append(row + (f"{slopes[stage]:8.2f}" if slopes.get(stage) is not None else f"{'-':>8}"))
    return "\n".join(lines)


def write_cost_curve(curve: dict, out: Path) -> tuple[Path, Path]:
    """cost_curve.json and cost_curve.svg (growth of time and memory against positions) in `out`."""
    from specdraft.report.charts import write_cost_curve_svg

    files.make_dirs(out)
    json_path = out / "cost_curve.json"
    files.write_text(json_path, json.dumps(curve, indent=2) + "\n")
    return json_path, write_cost_curve_svg(curve, out / "cost_curve.svg")


def main() -> None:  # python -m specdraft.measure.bench: the `make bench` defaults
    data = DEFAULT_REFERENCE.parents[1] / "data" / "qwen25-math-rollouts.parquet"
    started = time.perf_counter()
    peer = DEFAULT_PEER_BUILD if (DEFAULT_PEER_BUILD / "venv").exists() else None  # where build_peer.sh has run
    result = run_bench(data, {"train_limit": 6988}, DEFAULT_REFERENCE, None, peer)
    print(format_bench(result))
    say(f"bench took {time.perf_counter() - started:.0f} s", always=True)


if __name__ == "__main__":
    main()
