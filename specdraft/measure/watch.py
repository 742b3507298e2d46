"""`python -m specdraft.measure.watch CMD...`: run CMD and print, as one JSON line, when it
started (wall clock), its wall time, its peak memory as seen from outside, its exit code and its
output (what `specdraft bench` reads of each run).

The peak is the process tree's: every SAMPLE_S the resident memory of CMD's process, and while it
has descendants (forked tokenizer workers, the snapshot's copy; found every FIND_EVERY samples)
theirs too, as proportional set sizes (a page they share counted once); or, if higher, the
kernel's high-water mark of the largest process this one waited for (getrusage), which a spike
between two samples cannot escape. A descendant that has left the tree (reparented once its
parent exits) is no longer counted. Without /proc, the high-water mark alone.

SIGINT and SIGTERM are passed on to CMD, so a benchmark stopped by either does not leave its run
going on without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from specdraft.measure.timer import rusage_peak_bytes

SAMPLE_S = 0.02
FIND_EVERY = 5  # samples between two walks of the process tree (100 ms)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def descendants(root: int) -> list[int]:
    """`root` and every process below it (each thread's children), or [root] without /proc."""
    pids, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):  # gone meanwhile, or no /proc
            continue
    return pids


def resident_bytes(pids: list[int]) -> int:
    """The resident memory of the processes: one's resident set (statm); several's proportional
    set sizes summed (smaps_rollup), which count a page they share (a fork's, until written)
    once, as their resident sets summed would count it in each."""
    total = 0
    for pid in pids:
        try:
            if len(pids) == 1:
                with open(f"/proc/{pid}/statm") as statm:
                    total += int(statm.read().split()[1]) * PAGE
            else:
                with open(f"/proc/{pid}/smaps_rollup") as rollup:
                    total += next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        except (OSError, ValueError, IndexError, StopIteration):  # gone meanwhile, or no /proc
            continue
    return total


def watch(command: list[str]) -> dict:
    # a signal is passed on from before the child starts (one that comes while it starts is passed
    # on once it has): the wrapper never dies of it with the child left running
    child, pending = None, []

    def forward(number, _frame) -> None:
        if child is None:
            pending.append(number)
        else:
            child.send_signal(number)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    started_at, started = time.time(), time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for number in pending:
        child.send_signal(number)
    tree_peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal tree_peak
        pids, samples = [child.pid], 0
        while True:
            if samples % FIND_EVERY == 0:  # the tree's shape changes seldom; its memory, always
                pids = descendants(child.pid)
            tree_peak = max(tree_peak, resident_bytes(pids))
            samples += 1
            if done.wait(SAMPLE_S):
                return

    sampler = threading.Thread(target=sample, name="tree-rss", daemon=True)
    sampler.start()
    stdout, stderr = child.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    largest = rusage_peak_bytes(children=True)
    return {"started_at": started_at, "wall_s": wall, "peak_rss_bytes": max(tree_peak, largest), "tree_peak_rss_bytes": tree_peak,
            "largest_process_peak_rss_bytes": largest, "returncode": child.returncode,
            "stdout": stdout, "stderr": stderr[-4000:]}


if __name__ == "__main__":
    print(json.dumps(watch(sys.argv[1:])))
