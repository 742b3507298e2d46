"""The backoff drafter's picks (backoff_top_tokens) in numpy, sorted by context key.

- The n-gram stage makes them from the train keys it holds in memory (LengthPicks.of_positions),
  where they will fit in memory for the walk too (ngrams.numpy_picks): a sort of the positions by
  context, then of the repeated contexts' positions by next token. That is
  sql/tables/backoff_top_tokens.sql's grouping (which runs elsewhere: a build whose keys were
  spilled, or made on Spark, or whose picks would not fit), and they are written to the table in
  key order.
- The backoff walk reads them back (LengthPicks.read) and searches them (a lookup is a binary
  search); rows read in key order need no sort.

Development set, --preset seed (8 lengths, 10.1M picks): the table took 2.1 s in DuckDB and the
walk's read and sort 1.2 s; made here on a thread beside DuckDB's other tables, and read without
the sort, the run took 10.4-10.9 s against 11.0-11.6 s (alternated, 5 runs each), the same rows.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self

import numpy as np
import pyarrow as pa

from specdraft.tables.hashing import key_order, sorted_by_key
from specdraft.tables.train_keys import TrainKeys
from specdraft.warehouse.connection import Warehouse

BYTES_PER_PICK = 24  # a key (8 bytes), its row, token, count and total (4 each, where they fit)
# How backoff_top_tokens stores its columns (Warehouse.store), set rather than searched for: the
# keys are random 64-bit hashes and the token ids nearly as varied, which DuckDB spent time
# compressing little or not at all; counts and totals are mostly runs of 1, which run-length
# encoding keeps small. Writing the development set's 10.1M picks (8 lengths, either preset) took
# 0.45-0.64 s against 0.97-1.04 s in the n-gram stage (3 runs each), the file 334 MB against 257 MB.
STORED_COMPRESSION = {"ctx_hash": "uncompressed", "token_id": "uncompressed", "count": "rle", "total": "rle"}
SEEN_BITS = 32  # a pick's order of first sight fits below 2^32 (as backoff_top_tokens.sql assumes)

Found = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # found (a mask); token_id, count, total of those


@dataclass(frozen=True)
class LengthPicks:
    """backoff_top_tokens at one context length, its keys sorted: a lookup is a binary search.
    Searching the 8 lengths' 10.1M picks of the development set this way took the walk from 4.2 s
    (a join against the table per step, each a scan of all of it) to 2.6 s (reading 1.5 s), for the
    same drafts. Where the picks would not fit beside DuckDB (fit_beside), the walk joins
    (backoff_walk.TablePicks)."""

    keys: np.ndarray  # ctx_hash, ascending
    rows: np.ndarray | None  # where each key's pick is in the columns below (None: at the key's own row)
    token_id: np.ndarray
    count: np.ndarray
    total: np.ndarray

    @staticmethod
    def fit_beside(wh: Warehouse, times: int = 1) -> bool:
        """Do all lengths' picks, BYTES_PER_PICK each, fit in half of what the run's memory budget
        leaves beside DuckDB's share (`times` over: room for as much again beside them)? (The
        development set's 10.1M: 242 MB; 200,000 synthetic traces' 133M would take 3.2 GB.)"""
        if wh.memory_limit is None:
            return True
        (picks,), = wh.query("drafters/backoff_pick_count").fetchall()
        return wh.fits_beside_duckdb(times * picks * BYTES_PER_PICK)

    @classmethod
    def read(cls, wh: Warehouse, ctx_len: int) -> LengthPicks:
        """One length's picks as read from backoff_top_tokens: as they are, where they were
        written in key order (of_positions); else their keys sorted here with where each came from
        (key_order and one gather: DuckDB's ORDER BY took 1.2 s of the development set's 1.4 s
        read, and moving every column into key order another 0.3 s)."""
        picks = wh.query("drafters/backoff_length_picks", {"ctx_len": ctx_len}).fetchnumpy()
        keys = np.asarray(picks["ctx_hash"])
        columns = (_narrow(np.asarray(picks[name])) for name in ("token_id", "count", "total"))
        if np.all(keys[1:] > keys[:-1]):  # written in key order (of_positions' rows, as_table)
            return cls(keys, None, *columns)
        rows = key_order(keys)
        return cls(keys[rows], _narrow(rows), *columns)

    @classmethod
    def of_positions(cls, keys: TrainKeys, ctx_len: int) -> LengthPicks:
        """backoff_top_tokens.sql's rows at ctx_len, from the train positions' keys: per context
        (the positions with a key at the length and a backoff order), its most frequent next token
        (ties to the first seen), that token's count, and the context's total."""
        key, defined = keys.key(ctx_len)
        rows = np.flatnonzero(defined & keys.has_backoff)
        del defined
        # gathered in row order (sequential reads), then moved into key order: the random reads
        # of a length's sort are most of its time
        contexts, tokens = key[rows], keys.base["token_id"][rows]
        # (few and narrow arrays at a time: this runs beside DuckDB's build)
        del key
        rows = rows.astype(np.int32)
        order, contexts = sorted_by_key(contexts)  # by context; a context's positions stay in train order
        order = order.astype(np.int32)
        tokens = tokens[order]
        if not len(rows):
            return cls(contexts, None, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))
        starts = np.flatnonzero(np.r_[True, contexts[1:] != contexts[:-1]])
        total = np.diff(np.r_[starts, len(rows)])
        token_id, count = tokens[starts], np.ones(len(starts), dtype=np.int64)
        repeated = total > 1
        if repeated.any():  # the contexts seen more than once: each of their tokens counted
            at = np.repeat(repeated, total)
            context = np.flatnonzero(repeated)
            pairs = np.repeat(context, total[context])  # (context, token)
            token = tokens[at]
            bits = max(int(token.max()), 1).bit_length()
            pairs <<= bits
            pairs |= token
            # stable: a (context, token)'s first position comes first, the first time it was seen
            pair_order, pairs = sorted_by_key(pairs)
            first = np.flatnonzero(np.r_[True, pairs[1:] != pairs[:-1]])
            pair_count = np.diff(np.r_[first, len(pairs)])
            first_seen = keys.base["backoff_order"][rows[order[np.flatnonzero(at)[pair_order[first]]]]]
            del pair_order, order, at, rows
            pair_context = pairs[first] >> bits
            # the highest count, then the first seen: backoff_top_tokens.sql's arg_max
            rank = (pair_count << SEEN_BITS) - first_seen
            opens = np.flatnonzero(np.r_[True, pair_context[1:] != pair_context[:-1]])
            best = np.maximum.reduceat(rank, opens)
            won = np.flatnonzero(rank == np.repeat(best, np.diff(np.r_[opens, len(rank)])))
            token_id[pair_context[won]] = pairs[first[won]] & ((1 << bits) - 1)
            count[pair_context[won]] = pair_count[won]
        return cls(contexts[starts], None, token_id, _narrow(count), _narrow(total))

    def __len__(self) -> int:
        return len(self.keys)

    def as_table(self, ctx_len: int) -> pa.Table:
        """backoff_top_tokens' rows of this length, in its column types."""
        rows = slice(None) if self.rows is None else self.rows
        return pa.table({
            "ctx_len": pa.array(np.full(len(self), ctx_len, dtype=np.int32)),
            "ctx_hash": pa.array(self.keys),
            "token_id": pa.array(self.token_id[rows], pa.int32()),
            "count": pa.array(self.count[rows], pa.int64()),
            "total": pa.array(self.total[rows], pa.int64()),
        })

    def find(self, keys: np.ndarray) -> Found:
        """Which of `keys` have a pick, and the picks of those that do."""
        # searched in key order, each search starting where the last one ended: for the walk's
        # 100,000-odd keys a step, 4x faster than in row order (random reads of the picks)
        order = key_order(keys)
        at = np.empty(len(keys), dtype=np.int64)
        at[order] = np.searchsorted(self.keys, keys[order])
        inside = at < len(self.keys)
        found = np.zeros(len(keys), dtype=bool)
        found[inside] = self.keys[at[inside]] == keys[inside]
        rows = at[found] if self.rows is None else self.rows[at[found]]
        return found, self.token_id[rows], self.count[rows], self.total[rows]


def _narrow(values: np.ndarray) -> np.ndarray:
    """int32 where every value fits (token ids, and counts below 2^31): half the memory."""
    if values.dtype == np.int64 and len(values) and values.min() >= -(2**31) and values.max() < 2**31:
        return values.astype(np.int32)
    return values


class PicksAhead:
    """LengthPicks.of_positions for `lengths`, taken in that order, each made on a thread (its sorts,
    polars', and numpy's array work let go of the GIL) beside what the caller does meanwhile: the first once the
    caller reaches its length (not beside the heavier groupings of the shorter lengths before it),
    each next one when the one before is taken. (Two lengths made at once, on two threads, gave
    the seed preset's n-gram stage on the development set 5.08-5.10 s against 4.88-5.21 s, the
    cores being busy with DuckDB, and its peak 0.99-1.05 GiB against 0.88-0.92.)"""

    def __init__(self, keys: TrainKeys, lengths: list[int]) -> None:
        self._keys, self._lengths = keys, list(lengths)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="backoff-picks")
        self._next: tuple[int, Future] | None = None

    def reach(self, ctx_len: int) -> None:
        """The caller is at ctx_len: the first length's picks start if it is that far."""
        if self._next is None and self._lengths and self._lengths[0] <= ctx_len:
            self._start_next()

    def _start_next(self) -> None:
        self._next = None
        if self._lengths:
            ctx_len = self._lengths.pop(0)
            self._next = (ctx_len, self._pool.submit(LengthPicks.of_positions, self._keys, ctx_len))

    def take(self, ctx_len: int) -> LengthPicks:
        self.reach(ctx_len)
        if self._next is None or self._next[0] != ctx_len:
            raise ValueError(f"picks of length {ctx_len} taken out of turn")
        made = self._next[1]
        self._start_next()
        return made.result()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._next is not None:
            self._next[1].cancel()
        self._pool.shutdown(wait=True)
