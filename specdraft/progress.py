"""Progress bars and messages on stderr, switched off when stderr is not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, unit: str = "it", total: int | None = None) -> Iterator[T]:
    if not sys.stderr.isatty():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, unit=unit, total=total, file=sys.stderr, leave=False)


def say(message: str, always: bool = False) -> None:
    """One message on stderr (stdout carries data only): progress only on a terminal; with
    always=True (a warning the user must see), in scripts and logs too."""
    if always or sys.stderr.isatty():
        print(f"specdraft: {message}", file=sys.stderr)
