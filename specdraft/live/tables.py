"""Read-only lookups of context keys, for the live drafter: sorted arrays with a radix directory.

A table holds, per context length, its keys sorted (one segment of one array, memory-mapped from
the bundle). Keys are residues below M < 2^62 (keys.py), nearly uniform, so a key's top bits say
where in its segment it can be: the directory maps each of 2^bits buckets (n / 2 < 2^bits <= n
keys) to its first row, and a lookup reads two directory entries and binary-searches the bucket,
usually a row or two. (1-token contexts are not uniform, their keys are token + 1: they crowd the
first bucket, where the search keeps the lookup logarithmic.) That is about 0.35 us from Python,
against 1-2 us for np.searchsorted or bisect over a whole segment, and the directory is built at
load in one pass (np.bincount).

>>> table = ContextTable(np.array([3, 9, 2**61, 5], dtype=np.int64), [(1, 0, 3), (2, 3, 4)])
>>> table.find(1, 9), table.find(1, 4), table.find(2, 5), table.find(3, 5)
(1, -1, 3, -1)
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

KEY_BITS = 62  # every key is below M = P1 * P2 < 2^62


class ContextTable:
    """find(ctx_len, key) -> the row of `key` in ctx_len's segment, or -1. Immutable once built:
    safe to share between threads."""

    def __init__(self, keys: np.ndarray, segments: list[tuple[int, int, int]]) -> None:
        """keys: int64, each segment keys[start:stop] sorted; segments: (ctx_len, start, stop)."""
        self.keys_array = keys
        self.segments = {}  # ctx_len -> (directory offset, shift)
        # about one key per bucket: 2^bits buckets, n / 2 < 2^bits <= n
        layout = [(int(ctx_len), start, stop, max(int(stop - start).bit_length() - 1, 0))
                  for ctx_len, start, stop in segments]
        size = sum((1 << bits) + 1 for *_, bits in layout)
        row_type = np.int32 if len(keys) < 2**31 else np.int64
        self.directory_array = np.empty(max(size, 1), dtype=row_type)
        offset = 0
        for ctx_len, start, stop, bits in layout:
            shift = KEY_BITS - bits
            directory = self.directory_array[offset : offset + (1 << bits) + 1]
            directory[0] = 0
            np.cumsum(np.bincount(keys[start:stop] >> shift, minlength=1 << bits), out=directory[1:])
            directory += start
            self.segments[ctx_len] = (offset, shift)
            offset += len(directory)
        # memoryviews: indexing one gives a Python int without a numpy scalar in between
        self.keys = memoryview(keys)
        self.directory = memoryview(self.directory_array)

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(sorted(self.segments))

    def find(self, ctx_len: int, key: int) -> int:
        segment = self.segments.get(ctx_len)
        return -1 if segment is None else self.row(segment[0], segment[1], key)

    def row(self, offset: int, shift: int, key: int) -> int:
        """find() within the segment at directory `offset` (see plan()): a binary search of the
        key's bucket (usually a row or two; more where keys crowd, as 1-token contexts do)."""
        bucket = offset + (key >> shift)
        directory = self.directory
        stop = directory[bucket + 1]
        row = bisect_left(self.keys, key, directory[bucket], stop)
        return row if row < stop and self.keys[row] == key else -1

    def plan(self, lengths: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
        """(ctx_len, power, directory offset, shift) for each (ctx_len, power) the table has, in
        the given order: a source's probes without a dict lookup each. A length the table lacks
        cannot match, so it is left out."""
        return [(n, power, *self.segments[n]) for n, power in lengths if n in self.segments]

    @property
    def nbytes(self) -> int:
        return int(self.directory_array.nbytes)


def segments_of(ctx_lens: np.ndarray) -> list[tuple[int, int, int]]:
    """(ctx_len, start, stop) of each run of a sorted ctx_len column.

    >>> segments_of(np.array([1, 1, 4, 4, 4]))
    [(1, 0, 2), (4, 2, 5)]
    """
    if not len(ctx_lens):
        return []
    values, starts = np.unique(ctx_lens, return_index=True)
    stops = np.append(starts[1:], len(ctx_lens))
    return [(int(v), int(a), int(b)) for v, a, b in zip(values, starts, stops)]
