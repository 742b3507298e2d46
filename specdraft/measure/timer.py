"""Each stage's wall time and peak memory."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from specdraft.progress import say


@dataclass
class StageTimer:
    """Each stage's wall seconds and peak resident memory in bytes (stages do not nest).

    On Linux the kernel's high-water mark (VmHWM) is reset at each stage's start, so a stage's
    peak is its own rather than the run's so far; elsewhere it is the process's peak so far. The
    reset also lowers the peak a parent process reads from getrusage, so `process_peak_rss_bytes`
    keeps the maximum of every reading.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    process_peak_rss_bytes: int = 0
    started: float = field(default_factory=time.perf_counter)

    @contextmanager
    def stage(self, name: str):
        self.process_peak_rss_bytes = max(self.process_peak_rss_bytes, peak_rss_bytes())
        reset_peak_rss()
        started = time.perf_counter()
        say(f"{name} ...")
        yield
        self.seconds[name] = round(time.perf_counter() - started, 3)
        self.peak_rss_bytes[name] = peak_rss_bytes()
        self.process_peak_rss_bytes = max(self.process_peak_rss_bytes, self.peak_rss_bytes[name])

    def finish(self) -> None:
        """The run's total so far: wall seconds since the timer started, and the process's peak."""
        self.seconds["total"] = round(time.perf_counter() - self.started, 3)
        self.peak_rss_bytes["total"] = max(self.process_peak_rss_bytes, peak_rss_bytes(),
                                           *self.peak_rss_bytes.values())


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


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
    """This process's peak resident memory since the last reset: VmHWM on Linux, else ru_maxrss."""
    peak = _proc_status_bytes("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource
        import sys
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
