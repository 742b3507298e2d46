"""Benchmark: the seed reference and specdraft on the same data, cold, with the ratios.

Each side runs as its own process under a small wrapper that reports its wall time and peak
resident memory (getrusage of the wrapper's only child). specdraft runs end to end (ingest to
report) into a fresh warehouse. The every-position histograms of both are compared.

    specdraft bench --data ../shared/data/qwen25-math-rollouts.parquet --train-limit 6988
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "tools" / "reference_metrics.py"


def measure(command: list[str]) -> dict:
    """Run `command` in a child of a fresh wrapper process; return its wall time, peak RSS and stdout."""
    wrapper = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps({'wall_s': wall, 'peak_rss_bytes': rss, 'returncode': p.returncode,"
        " 'stdout': p.stdout, 'stderr': p.stderr[-4000:]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", wrapper, *command], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _flags(options: dict) -> list[str]:
    out: list[str] = []
    for key, value in options.items():
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


def run_bench(data: Path, seed_flags: dict, reference: Path, memory_limit: str | None) -> dict:
    reference_run = measure([sys.executable, str(reference), str(data), *_flags(seed_flags)])
    if reference_run["returncode"] != 0:
        raise RuntimeError(f"reference failed:\n{reference_run['stderr']}")
    with tempfile.TemporaryDirectory(prefix="specdraft-bench-") as tmp:
        command = [sys.executable, "-m", "specdraft.cli", "run", "--data", str(data),
                   "--warehouse", str(Path(tmp) / "warehouse"), "--out", str(Path(tmp) / "out"),
                   "--preset", "seed", *_flags(seed_flags)]
        if memory_limit:
            command += ["--memory-limit", memory_limit]
        ours_run = measure(command)
        if ours_run["returncode"] != 0:
            raise RuntimeError(f"specdraft failed:\n{ours_run['stderr']}")
        ours = json.loads((Path(tmp) / "out" / "results.json").read_text())
    theirs = json.loads(reference_run["stdout"])
    pairs = (("selected", "every_position"), ("oracle_best", "oracle_best"), ("decode_step", "decode_step_causal"))
    parity = {
        ours_key: {int(k): v for k, v in ours[ours_key]["histogram"].items()}
        == {int(k): v for k, v in theirs[ref_key]["histogram"].items()}
        for ours_key, ref_key in pairs
    }
    return {
        "data": str(data),
        "flags": seed_flags,
        "reference": {"wall_s": reference_run["wall_s"], "peak_rss_bytes": reference_run["peak_rss_bytes"],
                      "avg_accepted": theirs["every_position"]["avg_accepted"]},
        "specdraft": {"wall_s": ours_run["wall_s"], "peak_rss_bytes": ours_run["peak_rss_bytes"],
                      "avg_accepted": ours["selected"]["avg_accepted"], "stages_s": ours["timings_s"]},
        "speedup": reference_run["wall_s"] / ours_run["wall_s"],
        "memory_ratio": ours_run["peak_rss_bytes"] / reference_run["peak_rss_bytes"],
        "parity": parity,
    }


def format_bench(result: dict) -> str:
    gib = 1024**3
    ref, ours = result["reference"], result["specdraft"]
    lines = [
        f"data: {result['data']}",
        f"flags: {' '.join(_flags(result['flags']))}",
        f"{'':12}{'wall s':>10}{'peak GiB':>10}{'avg accepted':>14}",
        f"{'reference':12}{ref['wall_s']:10.1f}{ref['peak_rss_bytes'] / gib:10.2f}{ref['avg_accepted']:14.4f}",
        f"{'specdraft':12}{ours['wall_s']:10.1f}{ours['peak_rss_bytes'] / gib:10.2f}{ours['avg_accepted']:14.4f}",
        f"speedup {result['speedup']:.1f}x, memory {result['memory_ratio']:.2f} of the reference's",
        "parity (histograms equal): " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["parity"].items()),
        "specdraft stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in ours["stages_s"].items()),
    ]
    return "\n".join(lines)


def main() -> None:  # python -m specdraft.bench: the `make bench` defaults
    data = DEFAULT_REFERENCE.parents[1] / "data" / "qwen25-math-rollouts.parquet"
    started = time.perf_counter()
    result = run_bench(data, {"train_limit": 6988}, DEFAULT_REFERENCE, None)
    print(format_bench(result))
    print(f"(bench took {time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
