"""`python -m specdraft.measure.watch CMD...`: run CMD and print, as one JSON line, when it
started (wall clock), its wall time, its peak memory as seen from outside, its exit code and its
output (what `specdraft bench` reads of each run).

The peak is the process tree's: every SAMPLE_S the resident memory of CMD's process and of each
of its descendants (forked tokenizer workers, the snapshot's copy), summed; or, if higher, the
kernel's high-water mark of the largest process this one waited for (getrusage), which a spike
between two samples cannot escape. A descendant that has left the tree (reparented once its
parent exits) is no longer counted. Without /proc, the high-water mark alone.

SIGINT and SIGTERM are passed on to CMD, so a benchmark stopped by either does not leave its run
going on without it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

SAMPLE_S = 0.02
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def tree_rss_bytes(root: int) -> int:
    """The resident memory of process `root` and its descendants, summed (0 without /proc)."""
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
            for task in os.listdir(f"/proc/{pid}/task"):  # each thread's children
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
        except (OSError, ValueError, IndexError):  # gone meanwhile, or no /proc
            continue
    return total


def watch(command: list[str]) -> dict:
    started_at, started = time.time(), time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    tree_peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal tree_peak
        while True:
            tree_peak = max(tree_peak, tree_rss_bytes(child.pid))
            if done.wait(SAMPLE_S):
                return

    sampler = threading.Thread(target=sample, name="tree-rss", daemon=True)
    sampler.start()
    stdout, stderr = child.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"started_at": started_at, "wall_s": wall, "peak_rss_bytes": max(tree_peak, largest), "tree_peak_rss_bytes": tree_peak,
            "largest_process_peak_rss_bytes": largest, "returncode": child.returncode,
            "stdout": stdout, "stderr": stderr[-4000:]}


if __name__ == "__main__":
    print(json.dumps(watch(sys.argv[1:])))
