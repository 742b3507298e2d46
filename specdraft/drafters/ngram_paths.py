"""The global n-gram's choice of continuation by support (--preset default).

A draft is accepted up to its first wrong token, so what it is worth is the chance that its first
token is right, plus the chance that its first two are, and so on. A context's ranked
continuations (exact_continuations: up to --max-continuations-per-context, with their counts)
estimate those chances: a continuation's support at depth d is the summed count of the
continuations that share its first d tokens (its own included). The path is chosen depth by depth:
the continuation whose supports are the greatest, element by element (the most shared first
token, then the most shared first two tokens among those, ...), ties to the more frequent. It is
SuffixDecoding's greedy path through its suffix tree, over the ranked continuations. The most
frequent continuation is off the path when a group of others shares a first token more often
than it appears (on the development set, at a third of the eval positions' contexts with several
continuations; their path drafts got 2.351 accepted tokens against the most frequent's 2.268).

>>> rows = pa.table({"ctx_len": [2, 2, 2, 3], "ctx_hash": [7, 7, 7, 9], "rank": [1, 2, 3, 1],
...                  "count": [4, 3, 2, 5]})
>>> tokens = np.array([[5, 6], [8, 1], [8, 2], [1, -1]])  # -1 past a continuation's end
>>> path_choices(rows, tokens).to_pylist()  # 8 starts 3 + 2 = 5 continuations, 5 only 4
[{'ctx_len': 2, 'ctx_hash': 7, 'rank': 2}, {'ctx_len': 3, 'ctx_hash': 9, 'rank': 1}]
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from specdraft.config import NUMPY_THREADS, RunConfig
from specdraft.tables.hashing import sorted_by_key
from specdraft.warehouse.connection import Warehouse

PATH_CHOICES_SCHEMA = pa.schema([("ctx_len", pa.int32()), ("ctx_hash", pa.int64()), ("rank", pa.int64())])


def build_ngram_choices(wh: Warehouse, cfg: RunConfig, by_support: bool, temp: bool = False) -> None:
    """Each context's two continuations to draft (ngram_choices.sql) from exact_continuations: the
    two most frequent, or with by_support the one on its most supported path and then the most
    frequent other."""
    chosen = []
    if by_support:
        store = TokenStore.read(wh)
        # each length's choices are numpy work (which lets go of the GIL), made on two threads
        # while this one reads the next lengths' rows: 0.37-0.38 s on the development set (with
        # every continuation's tokens gathered and sorted, 0.63-0.83 s; one after the other 1.1 s)
        with ThreadPoolExecutor(max_workers=NUMPY_THREADS, thread_name_prefix="ngram-paths") as pool:
            choosing = []
            for ctx_len in cfg.context_lengths:
                rows = wh.query("drafters/ngram_path_drafts", {"ctx_len": ctx_len}).to_arrow_table()
                choosing.append(pool.submit(_length_choices, store, rows, cfg.draft_len))
            chosen = [choices.result() for choices in choosing]
    wh.register("path_choices", pa.concat_tables([PATH_CHOICES_SCHEMA.empty_table(), *chosen]))
    wh.materialize("drafters/ngram_choices", temp=temp)


def _length_choices(store: TokenStore, rows: pa.Table, draft_len: int) -> pa.Table:
    return path_choices(rows, store.continuations(rows.column("src_trace_id").to_numpy(),
                                                   rows.column("src_pos").to_numpy(), draft_len))


@dataclass(frozen=True)
class TokenStore:
    """The train traces' tokens end to end (train_tokens.sql), to gather continuations from."""

    trace_ids: np.ndarray  # ascending
    starts: np.ndarray  # where each trace's tokens begin in flat
    sizes: np.ndarray
    flat: np.ndarray

    @classmethod
    def read(cls, wh: Warehouse) -> TokenStore:
        traces = wh.query("drafters/train_tokens").to_arrow_table()
        tokens = traces.column("tokens").combine_chunks()
        offsets = tokens.offsets.to_numpy().astype(np.int64)
        # the token ids as Arrow holds them (int32): 200,000 synthetic traces have 52M
        return cls(traces.column("trace_id").to_numpy().astype(np.int64), offsets[:-1] - offsets[0],
                   np.diff(offsets), tokens.flatten().to_numpy(zero_copy_only=False))

    def continuations(self, trace_ids: np.ndarray, positions: np.ndarray, length: int) -> Continuations:
        """The continuations from each (trace, position) on, up to `length` tokens, read a depth
        at a time (path_choices reads only the rows it still compares)."""
        row = np.searchsorted(self.trace_ids, trace_ids)
        positions = positions.astype(np.int64)
        return Continuations(self.flat, self.starts[row] + positions,
                             np.minimum(self.sizes[row] - positions, length), length)


@dataclass(frozen=True)
class Continuations:
    """Rows of tokens, each `lengths[i]` long from `flat[starts[i]]` on, read a depth at a time."""

    flat: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    width: int

    @classmethod
    def of_lists(cls, lists: pa.Array | pa.ChunkedArray) -> Continuations:
        """A row of tokens each, as Arrow lists (lookup's ranked continuations)."""
        lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
        offsets = lists.offsets.to_numpy().astype(np.int64)
        lengths = np.diff(offsets)
        return cls(lists.flatten().to_numpy(zero_copy_only=False), offsets[:-1] - offsets[0], lengths,
                   int(lengths.max(initial=0)))

    @classmethod
    def of_matrix(cls, tokens: np.ndarray) -> Continuations:
        """A row of tokens each (-1 past a row's end)."""
        n, width = tokens.shape
        return cls(tokens.reshape(-1), np.arange(n, dtype=np.int64) * width, (tokens >= 0).sum(axis=1), width)

    def at(self, rows: np.ndarray, depth: int) -> np.ndarray:
        """Token `depth` of each of `rows`, -1 past its end."""
        inside = depth < self.lengths[rows]
        return np.where(inside, self.flat[np.where(inside, self.starts[rows] + depth, 0)], -1)


def path_choices(contexts: pa.Table, tokens: np.ndarray | Continuations) -> pa.Table:
    """(ctx_len, ctx_hash, rank) of each context's continuation on its most supported path, from
    its continuations' rows (ctx_len, ctx_hash, rank, count, in context and rank order) and their
    tokens (a row each, -1 past a continuation's end: a matrix, or Continuations).

    Depth by depth, the rows still compared in each context are narrowed to those whose support
    (the summed count of the rows sharing their first depth + 1 tokens; 0 past their end) is the
    greatest there. Rows sharing a first d tokens share their supports before depth d, so they are
    compared, or let go, together: each support is summed over the rows still compared (rows tied
    so far may differ in an earlier token: a support is of rows sharing every token so far). A
    context with one row left has chosen it; rows tied to the end leave the most frequent (the
    lowest rank, the first). Only the rows still compared have their tokens read: on the
    development set's 444,834 ranked continuations (8 a context), 0.2 s on one thread, where
    sorting every row by all its tokens took 0.64 s (and gathering them 0.17 s)."""
    if isinstance(tokens, np.ndarray):
        tokens = Continuations.of_matrix(tokens)
    n = contexts.num_rows
    if not n:
        return PATH_CHOICES_SCHEMA.empty_table()
    ctx_len = contexts.column("ctx_len").to_numpy()
    ctx_hash = contexts.column("ctx_hash").to_numpy()
    context = np.cumsum(np.r_[True, (ctx_len[1:] != ctx_len[:-1]) | (ctx_hash[1:] != ctx_hash[:-1])]) - 1
    count = contexts.column("count").to_numpy().astype(np.int64)
    # alive: the rows still compared; prefix: which of their context's rows share their tokens so
    # far (numbered in context order)
    chosen, alive, prefix = [], np.arange(n), context
    for depth in range(tokens.width):
        at = context[alive]
        first = np.r_[True, at[1:] != at[:-1]]
        alone = first & np.r_[first[1:], True]
        chosen.append(alive[alone])
        alive, prefix, first = alive[~alone], prefix[~alone], first[~alone]
        if not len(alive):
            break
        token = tokens.at(alive, depth)
        # the rows sharing this token too, together: the prefix in the high bits, the token + 1
        # (0 past the end) in the low ones
        order, keys = sorted_by_key((prefix << int(token.max() + 1).bit_length()) | (token + 1))
        new_run = np.r_[True, keys[1:] != keys[:-1]]
        runs = np.flatnonzero(new_run)
        sums = np.add.reduceat(count[alive[order]], runs)
        support = np.empty(len(alive), dtype=np.int64)
        support[order] = np.repeat(sums, np.diff(np.r_[runs, len(order)]))
        support[token < 0] = 0
        prefix = np.empty(len(alive), dtype=np.int64)
        prefix[order] = np.cumsum(new_run) - 1
        starts = np.flatnonzero(first)
        best = np.repeat(np.maximum.reduceat(support, starts), np.diff(np.r_[starts, len(alive)]))
        keep = support == best
        alive, prefix = alive[keep], prefix[keep]
    at = context[alive]
    chosen.append(alive[np.r_[True, at[1:] != at[:-1]][: len(alive)]])  # tied to the end: the lowest rank
    picked = np.sort(np.concatenate(chosen))  # a row a context, in context order
    return pa.table({"ctx_len": pa.array(ctx_len[picked], pa.int32()), "ctx_hash": pa.array(ctx_hash[picked], pa.int64()),
                     "rank": pa.array(contexts.column("rank").to_numpy()[picked], pa.int64())})
