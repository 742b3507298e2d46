"""One writer per warehouse."""

from __future__ import annotations

import os
import time
from pathlib import Path

from specdraft.errors import SpecdraftError

LOCK_FILE = ".writer.lock"



class WriterLock:
    """One writer per warehouse: an exclusive flock on <warehouse>/.writer.lock, holding the
    writer's pid and start time so that others can say who is busy. The kernel drops the lock
    when the process dies, even on kill -9."""

    def __init__(self, path: Path) -> None:
        import fcntl

        self.file = open(path, "a+")  # noqa: SIM115 - held open for the writer's lifetime
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            holder = WriterLock.holder(path) or "another process"
            raise SpecdraftError(f"{path.parent}: warehouse is busy ({holder})") from None
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

    def release(self) -> None:
        if not self.file.closed:
            self.file.close()
