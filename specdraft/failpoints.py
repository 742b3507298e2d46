"""Failpoints: named places in the code where a test can kill, interrupt or pause a run.

A test cannot time a kill to land inside a stage (a fixture run lasts about a second), so the code
says where the interesting places are, as etcd's gofail, TiKV's fail-rs and SQLite's test hooks
do: `reach("transaction:ngram_tables:before_commit")`. Nothing happens unless the environment
variable SPECDRAFT_FAILPOINT names that point:

    SPECDRAFT_FAILPOINT="transaction:ngram_tables:before_commit=kill"
    SPECDRAFT_FAILPOINT="write:results.json:before_rename=interrupt;transaction:*:after_commit=record"

Each entry is `pattern=action`, entries separated by `;`, patterns matched as shell globs
(fnmatch), the first match wins. The actions:

- `kill`: SIGKILL this process, as `kill -9` would: nothing after it runs, no cleanup.
- `interrupt`: SIGINT, as Ctrl-C would, raised in the thread at the point (Python raises
  KeyboardInterrupt right there, on the main thread).
- `pause`: say "failpoint <point> reached", then wait until the file named by
  SPECDRAFT_FAILPOINT_RELEASE exists or, without it, for a line on stdin (one line releases one
  pause; closing stdin releases this one and every later one); then go on. The test holding the
  other end decides when the run continues (or kills it meanwhile), so no sleep guesses how long
  anything takes.
- `record`: say "failpoint <point> reached" and go on (which points a run passes, in order).

"Say" means a line appended to the file named by SPECDRAFT_FAILPOINT_LOG, or to stderr without it.

The points in the code: `transaction:<name>:before_commit` and `...:after_commit` (every
Warehouse.transaction) and `write:<file name>:before_rename` and `...:after_rename` (every file
written through specdraft.files). Unset, `reach` costs one environment lookup.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import signal
import sys
import time

ENV = "SPECDRAFT_FAILPOINT"
LOG_ENV = "SPECDRAFT_FAILPOINT_LOG"
RELEASE_ENV = "SPECDRAFT_FAILPOINT_RELEASE"
ACTIONS = ("kill", "interrupt", "pause", "record")
# How often a paused run looks for its release file: a wait, never a guess at how long work takes.
RELEASE_POLL_S = 0.01


@functools.lru_cache(maxsize=8)
def parse(spec: str) -> tuple[tuple[str, str], ...]:
    """The (pattern, action) pairs of a SPECDRAFT_FAILPOINT value.

    >>> parse("transaction:*:before_commit=kill; write:results.json:after_rename=pause")
    (('transaction:*:before_commit', 'kill'), ('write:results.json:after_rename', 'pause'))
    """
    pairs = []
    for entry in spec.split(";"):
        if not entry.strip():
            continue
        pattern, _, action = entry.rpartition("=")
        if not pattern.strip() or action.strip() not in ACTIONS:
            raise ValueError(f"{ENV}: {entry.strip()!r} is not <point>=<{'|'.join(ACTIONS)}>")
        pairs.append((pattern.strip(), action.strip()))
    return tuple(pairs)


def reach(point: str) -> None:
    """The run is at `point`: act if SPECDRAFT_FAILPOINT names it, else nothing."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    action = next((action for pattern, action in parse(spec) if fnmatch.fnmatchcase(point, pattern)), None)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "interrupt":
        # to this thread (C's raise), so the handler runs before raise_signal returns, whichever
        # threads the process has, and on the main thread KeyboardInterrupt is raised right here
        # (os.kill(os.getpid(), ...) lets the kernel hand it to any thread that does not block it).
        # Ignored where the process was started with SIGINT ignored (a shell's background job)
        signal.raise_signal(signal.SIGINT)
    elif action in ("pause", "record"):
        _say(f"failpoint {point} reached")
        if action == "pause":
            _wait_for_release()


def _say(line: str) -> None:
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")
    else:
        print(line, file=sys.stderr, flush=True)


def _wait_for_release() -> None:
    release = os.environ.get(RELEASE_ENV)
    if release:
        while not os.path.exists(release):
            time.sleep(RELEASE_POLL_S)
    else:
        sys.stdin.readline()  # a line, or the other end closing it
