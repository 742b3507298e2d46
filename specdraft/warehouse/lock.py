"""One writer per warehouse."""

from __future__ import annotations

import os
import time
from pathlib import Path

from specdraft.errors import SpecdraftError
from specdraft.files import running

LOCK_FILE = ".writer.lock"
# How long a writer waits for the last snapshot copy of a writer that has ended.
COPY_WAIT_S = 600.0
COPY_POLL_S = 0.05


class WriterLock:
    """One writer per warehouse: an exclusive flock on <warehouse>/.writer.lock, holding the
    writer's pid and start time so that others can say who is busy. The kernel drops the lock
    when the process dies, even on kill -9."""

    def __init__(self, path: Path) -> None:
        import fcntl

        self.file = open(path, "a+")  # noqa: SIM115 - held open for the writer's lifetime
        waited = 0.0
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = WriterLock.holder(path)
                if holder is None:  # let go between the two looks: try again
                    continue
                if _holder_running(holder) or waited >= COPY_WAIT_S:
                    self.file.close()
                    raise SpecdraftError(f"{path.parent}: warehouse is busy ({holder})") from None
            # the writer named there has ended: its last copy for readers holds the lock until it
            # is in (snapshot.Copy)
            time.sleep(COPY_POLL_S)
            waited += COPY_POLL_S
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        self.file.flush()

    @staticmethod
    def holder(path: Path) -> str | None:
        """'pid N, since T' of the process holding the lock, or None when nobody holds it."""
        import fcntl

        try:
            with open(path) as probe:
                try:
                    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return probe.read().strip() or "another process"
                fcntl.flock(probe, fcntl.LOCK_UN)
        except FileNotFoundError:
            return None
        return None

    def fileno(self) -> int:
        """The lock's descriptor: a process that inherits it holds the lock too, until it exits."""
        return self.file.fileno()

    def release(self) -> None:
        if not self.file.closed:
            self.file.close()


def _holder_running(holder: str) -> bool:
    """Is the writer named in the lock file ('pid N, since T') still running?"""
    pid = holder.removeprefix("pid ").split(",")[0]
    return not pid.isdigit() or running(int(pid))
