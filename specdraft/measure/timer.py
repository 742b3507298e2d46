"""Each stage's wall time and peak memory."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Self

from specdraft.progress import say

SAMPLE_SECONDS = 0.01


@dataclass
class StageTimer:
    """Each stage's wall seconds and peak resident memory in bytes (stages do not nest).

    A stage's peak is the highest resident memory a sampling thread reads (VmRSS every 10 ms,
    and at the stage's start and end); the process's own high-water mark (VmHWM) is never reset,
    so `/usr/bin/time`, getrusage and a parent process see the true peak. A spike shorter than the
    sampling interval can escape a stage's figure, never the total's: the total is VmHWM.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        say(f"{name} ...")
        with RssSampler() as sampler:
            yield
        self.seconds[name] = round(time.perf_counter() - started, 3)
        self.peak_rss_bytes[name] = sampler.peak

    def finish(self) -> None:
        """The run's total so far: wall seconds since the timer started, and the process's peak."""
        self.seconds["total"] = round(time.perf_counter() - self.started, 3)
        self.peak_rss_bytes["total"] = max(peak_rss_bytes(), *self.peak_rss_bytes.values())


class RssSampler:
    """The highest resident memory of this process while the block runs, read by a thread every
    SAMPLE_SECONDS (reading /proc/self/status takes microseconds)."""

    def __init__(self, interval: float = SAMPLE_SECONDS) -> None:
        self.interval = interval
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, current_rss_bytes())
            if self._done.wait(self.interval):
                return

    def __enter__(self) -> Self:
        self.peak = current_rss_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_bytes())


def _proc_status_bytes(field: str) -> int | None:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in bytes; None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss_bytes() -> int:
    """This process's resident memory now (VmRSS on Linux; elsewhere the peak so far)."""
    resident = _proc_status_bytes("VmRSS")
    return peak_rss_bytes() if resident is None else resident


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM on Linux, else ru_maxrss."""
    peak = _proc_status_bytes("VmHWM")
    return peak if peak is not None else rusage_peak_bytes()


def rusage_peak_bytes(children: bool = False) -> int:
    """getrusage's ru_maxrss in bytes: this process's peak, or with children=True the largest of
    the children it has waited for (0 on Windows)."""
    try:
        import resource
        import sys
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
