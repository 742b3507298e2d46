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


class Copy:
    """The warehouse file being copied to the snapshot, by a shell that copies it into a partial
    file beside it and renames that over the snapshot. The writer stops it (stop) if it still runs
    when the writer checkpoints again, and waits for it before closing with a WAL to checkpoint.
    At the end it need not wait: the shell inherits the writer's lock (the
    descriptor of its flock), so that after the writer has closed (when closing writes nothing:
    no WAL) and even exited, no other writer starts until the copy is in. The writer's process so
    goes on (results, report) or ends while the copy finishes; a writer that then finds the lock
    held by a process no longer running waits for it (lock.WriterLock)."""

    pending: ClassVar[set[Copy]] = set()  # this process's copies (its next writer waits for them)

    def __init__(self, db_path: Path, lock_fd: int) -> None:
        self.snapshot = snapshot_path(db_path.parent)
        self.partial = partial_path(self.snapshot)
        self.process = subprocess.Popen(
            ["sh", "-c", COPY_SCRIPT, "sh", str(db_path), str(self.partial), str(self.snapshot)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            pass_fds=(lock_fd,), start_new_session=True,  # a Ctrl-C of the run does not stop it
        )
        Copy.pending.add(self)

    def wait(self) -> None:
        self._ended(stopped=False)

    def stop(self) -> None:
        """Give up this copy for a newer commit's: end the shell and its cp (a session of their own)
        and drop the partial file. Readers keep the last whole copy (one stopped after its rename
        has put in a whole copy all the same). While commits come faster than copies, readers so
        see an older commit than the writer's last until a copy is let finish: the writer does not
        wait for readers' copies."""
        stopped = False
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
                stopped = True
            except ProcessLookupError:  # ended meanwhile
                pass
        self._ended(stopped)

    def _ended(self, stopped: bool) -> None:
        # communicate() returns at the end of stderr, which cp holds too (inherited): so cp has
        # ended, and cannot write the partial file after it is removed here
        _, error = self.process.communicate()
        Copy.pending.discard(self)
        if self.process.returncode != 0:  # readers keep the last whole copy
            self.partial.unlink(missing_ok=True)
            if not stopped:
                log.warning("%s: could not copy the warehouse for readers (%s)", self.snapshot, error.strip())

    @classmethod
    def wait_for_pending(cls) -> None:
        for copy in list(cls.pending):
            copy.wait()
