"""Reading while a run builds: the snapshot, a copy of the warehouse's DuckDB file as its writer
last committed it.

DuckDB lets one process open a database file for writing, and then no other process may open it,
not even to read. A build holds the file for minutes, so readers (`specdraft sql`, `report`,
`compare`, `lookup`, `specdraft.open`) would be locked out for all of it. Instead, after each
commit the writer checkpoints (the commit's WAL into the file) and copies the file to
`specdraft.snapshot.duckdb`, under a temporary name renamed over the old copy when done; a reader
that finds the file locked opens the snapshot. It so holds a whole committed state, the old copy
or the new one, which the rename cannot change under it (its file stays open). When no build
runs, readers open the warehouse file itself.

A commit's copy starts once the writer has gone QUIET_S seconds without committing again, or when
it closes: a run's stages commit seconds apart, and a copy still running at the next commit is given
up, so copying after each commit copied the file again and again for nothing but the last (see
QUIET_S). Readers so see a commit QUIET_S seconds after it is made, plus the copy, or at the end
of the writer.

The copy runs beside the build, in a `cp` process, while the next stage writes, for this reason:
DuckDB never writes over the blocks of its last checkpoint until it checkpoints again (a
transaction's writes go to blocks that checkpoint left free), so between two checkpoints the file
holds that checkpoint's state, read as such however the rest of the file changes. A copy still
running when the writer commits again is stopped (the newer commit's copy replaces it) before the
writer checkpoints; the writer waits for a copy before it closes with a WAL to checkpoint; and it turns
DuckDB's automatic checkpoints off (checkpoint_threshold) so that none comes between. Block
checksums, checked on every read, would catch a copy this reasoning got wrong;
tests/test_reading_while_building.py checks the reasoning itself on the DuckDB installed. The
run's last copy may outlive its process: see Copy.

The copy is made by another process also because DuckDB's lock is a POSIX record lock, which the
kernel drops when the process closes any descriptor of the file, as copying it in-process would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import ClassVar

from specdraft.files import partial_path

SNAPSHOT_FILE = "specdraft.snapshot.duckdb"
log = logging.getLogger("specdraft.sql")


def snapshot_path(root: Path) -> Path:
    return Path(root) / SNAPSHOT_FILE


def is_current(db_path: Path) -> bool:
    """Does the snapshot hold the warehouse file as it is now? It was copied after the file's last
    change, so it is newer; a file changed since (a run killed between its commit and its copy, a
    warehouse made before snapshots, `specdraft sql --write`) is as new or newer."""
    snapshot = snapshot_path(db_path.parent)
    if not snapshot.exists() or has_wal(db_path):
        return False
    return os.stat(db_path).st_mtime_ns < os.stat(snapshot).st_mtime_ns


def has_wal(db_path: Path) -> bool:
    """Does the file have commits not yet checkpointed into it (DuckDB removes the WAL when it
    checkpoints, and checkpoints it on close)?"""
    return Path(f"{db_path}.wal").exists()


# Copies, then renames over the snapshot; run as `sh -c COPY_SCRIPT sh DB PARTIAL SNAPSHOT`. At the
# lowest CPU priority: the copy (the kernel's, 0.5 GB after the development set's n-gram tables)
# runs beside the stages that follow, and should take only the CPU they leave idle.
COPY_SCRIPT = 'nice -n 19 cp -- "$1" "$2" && mv -f -- "$2" "$3"'
# How long a commit's copy waits for the writer's next commit before it starts (the writer's close
# starts it at once). The development set's stages commit 1.5-7 s apart: each commit's copy (376 MB
# after the candidates stage) used to start at once, to be given up at the next commit, all but
# the last, and the copying took the stages' CPU, page cache and disk. With the wait, --preset
# default took 15.4-17.3 s in process against 15.5-19.0 s, and 4.4-5.1 s of system CPU against
# 4.8-6.0 s; --preset seed 8.1-8.7 s against 8.5-9.0 s, 2.6-2.9 s against 3.2-3.5 s (3 alternated
# pairs each).
QUIET_S = 10.0


class Copy:
    """The warehouse file to be copied to the snapshot, by a shell that copies it into a partial
    file beside it and renames that over the snapshot. The shell starts QUIET_S seconds after the
    commit (a timer thread), or at once when the writer closes or waits for it (start). The writer
    gives it up (stop) if it has not ended when the writer checkpoints again, and waits for it
    before closing with a WAL to checkpoint. At the end it need not wait: the shell inherits the
    writer's lock (the descriptor of its flock), so that after the writer has closed (when closing
    writes nothing: no WAL) and even exited, no other writer starts until the copy is in. The
    writer's process so goes on (results, report) or ends while the copy finishes; a writer that
    then finds the lock held by a process no longer running waits for it (lock.WriterLock)."""

    pending: ClassVar[set[Copy]] = set()  # this process's copies (its next writer waits for them)

    def __init__(self, db_path: Path, lock_fd: int) -> None:
        self.snapshot = snapshot_path(db_path.parent)
        self.partial = partial_path(self.snapshot)
        self.process: subprocess.Popen | None = None  # the shell, once started
        self._command = ["sh", "-c", COPY_SCRIPT, "sh", str(db_path), str(self.partial), str(self.snapshot)]
        # its own descriptor of the writer's lock (the same open file, so the same flock): the
        # lock stays held until the shell has its copy of it, even where the writer lets go of its
        # own before the copy starts (a writer dropped without closing, as tests and notebooks do)
        self._lock_fd: int | None = os.dup(lock_fd)
        self._given_up = False
        self._starting = threading.Lock()  # the timer's start against the writer's start and stop
        Copy.pending.add(self)
        self._timer = threading.Timer(QUIET_S, self.start)
        self._timer.daemon = True  # a writer killed before it starts leaves its snapshot stale: see is_current
        self._timer.start()

    def start(self) -> None:
        """Start copying now, unless started or given up; the shell inherits the lock's descriptor."""
        self._timer.cancel()  # (when called before it fires)
        with self._starting:
            try:
                if self.process is None and not self._given_up:
                    self.process = subprocess.Popen(
                        self._command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True, pass_fds=(self._lock_fd,), start_new_session=True,  # a Ctrl-C of the run does not stop it
                    )
            finally:
                self._let_go_of_lock()

    def _let_go_of_lock(self) -> None:
        """Close this copy's descriptor of the lock (the shell, if started, holds its own)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def wait(self) -> None:
        self.start()
        self._ended(stopped=False)

    def stop(self) -> None:
        """Give up this copy for a newer commit's: before it starts, or by ending the shell and its cp
        (a session of their own) and dropping the partial file. Readers keep the last whole copy
        (one stopped after its rename has put in a whole copy all the same). While commits come
        faster than copies, readers so see an older commit than the writer's last until a copy is
        let finish: the writer does not wait for readers' copies."""
        with self._starting:
            self._given_up = True
            self._let_go_of_lock()
        self._timer.cancel()
        stopped = False
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
                stopped = True
            except ProcessLookupError:  # ended meanwhile
                pass
        self._ended(stopped)

    def _ended(self, stopped: bool) -> None:
        Copy.pending.discard(self)
        if self.process is None:  # given up before it started
            return
        # communicate() returns at the end of stderr, which cp holds too (inherited): so cp has
        # ended, and cannot write the partial file after it is removed here
        _, error = self.process.communicate()
        if self.process.returncode != 0:  # readers keep the last whole copy
            self.partial.unlink(missing_ok=True)
            if not stopped:
                log.warning("%s: could not copy the warehouse for readers (%s)", self.snapshot, error.strip())

    @classmethod
    def wait_for_pending(cls) -> None:
        for copy in list(cls.pending):
            copy.wait()
