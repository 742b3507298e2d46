"""Every file specdraft writes appears whole or not at all.

A file is written under a temporary name beside its target and renamed over it (os.replace, one
atomic step on POSIX), so a reader, or the next run after a crash, Ctrl-C or kill -9, finds the
old file or the new one, never half of one. (This covers the process dying, not the machine
losing power: there is no fsync.)
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specdraft.failpoints import reach


def make_dirs(path: str | os.PathLike) -> Path:
    """mkdir -p `path`. Where a file stands on the way, the error names that file as not a
    directory (Path.mkdir says "File exists" of it, as if the directory were there, or names the
    path below it)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocking is None:  # gone meanwhile
            raise
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocking)) from None
    return path


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` to write; when the block ends cleanly it is renamed to
    `path`, otherwise removed. Failpoints `write:<file name>:before_rename` and `after_rename`."""
    path = Path(path)
    make_dirs(path.parent)
    partial = partial_path(path)
    try:
        yield partial
        rename_partial(partial, path)
    except OSError as exc:
        _raise_naming(exc, partial, path)
    finally:
        partial.unlink(missing_ok=True)


def rename_partial(partial: Path, path: Path) -> None:
    """atomic_path's last step on its own: the written temporary file `partial` (partial_path)
    renamed over `path`, for a writer that must have the file in place at a moment of its own
    choosing (ingest: before the catalog commits) and removes the partial itself otherwise."""
    try:
        reach(f"write:{path.name}:before_rename")
        os.replace(partial, path)
        reach(f"write:{path.name}:after_rename")
    except OSError as exc:
        _raise_naming(exc, partial, path)


def _raise_naming(exc: OSError, partial: Path, path: Path) -> None:
    """Raise `exc`, naming the user's path where it names the temporary one beside it, which they
    never named."""
    if exc.filename not in (str(partial), partial):
        raise exc
    raise type(exc)(exc.errno, exc.strerror, str(path)) from exc


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path` to fill; when the block ends cleanly it is
    renamed to `path`, otherwise removed. A directory already at `path` is moved aside first and
    removed after (the caller decides whether it may be replaced). Failpoints
    `write:<name>:before_rename` and `after_rename`."""
    path = Path(path)
    make_dirs(path.parent)
    partial = partial_path(path)
    partial.mkdir()
    try:
        yield partial
        reach(f"write:{path.name}:before_rename")
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.{os.getpid()}.old.partial")
            os.replace(path, old)
        os.replace(partial, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        reach(f"write:{path.name}:after_rename")
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as partial:
        partial.write_text(text, encoding="utf-8")
    return Path(path)


PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)(?P<old>\.old)?\.partial")


def partial_path(path: Path) -> Path:
    """`.<name>.<pid>.partial` beside `path`, after removing those a killed writer left behind
    (a partial whose pid is still running belongs to a live writer: keep it). An old copy that
    atomic_dir had moved aside, killed before it renamed the new one in, is put back instead."""
    for stale in path.parent.glob(f".{path.name}.*.partial"):
        _sweep(stale, path)
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def sweep_partials(folder: Path) -> None:
    """What partial_path does before a write, for every file of `folder`: the partials of killed
    writers go (an old copy moved aside comes back), so that a file no one writes again does not
    keep a killed write's partial (a traces Parquet's can be gigabytes) for good."""
    for stale in Path(folder).glob(".*.partial"):
        match = PARTIAL.fullmatch(stale.name)
        if match:
            _sweep(stale, stale.with_name(match["name"]))


def _sweep(stale: Path, path: Path) -> None:
    """`stale`, a partial of `path`: removed (or put back, an old copy moved aside) once the
    writer named in it has ended."""
    match = PARTIAL.fullmatch(stale.name)
    if match is None or match["name"] != path.name or running(int(match["pid"])):
        return
    if match["old"] and not path.exists():
        os.replace(stale, path)
    elif stale.is_dir():
        shutil.rmtree(stale, ignore_errors=True)
    else:
        stale.unlink(missing_ok=True)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
