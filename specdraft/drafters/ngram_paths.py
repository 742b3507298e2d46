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
from specdraft.tables.hashing import lexsort, packed_keys, prefix_order
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
        # while this one reads the next lengths' rows: 0.38 s against 0.67 s on the development set
        with ThreadPoolExecutor(max_workers=NUMPY_THREADS, thread_name_prefix="ngram-paths") as pool:
            choosing = []
            for ctx_len in cfg.context_lengths:
                rows = wh.query("drafters/ngram_path_drafts", {"ctx_len": ctx_len}).to_arrow_table()
                choosing.append(pool.submit(_length_choices, store, rows, cfg.draft_len))
            chosen = [choices.result() for choices in choosing]
    wh.register("path_choices", pa.concat_tables([PATH_CHOICES_SCHEMA.empty_table(), *chosen]))
    wh.materialize("drafters/ngram_choices", temp=temp)


def _length_choices(store: TokenStore, rows: pa.Table, draft_len: int) -> pa.Table:
    tokens = store.continuations(rows.column("src_trace_id").to_numpy(), rows.column("src_pos").to_numpy(), draft_len)
    return path_choices(rows, tokens)


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
        return cls(traces.column("trace_id").to_numpy().astype(np.int64), offsets[:-1] - offsets[0],
                   np.diff(offsets), tokens.flatten().to_numpy(zero_copy_only=False).astype(np.int64))

    def continuations(self, trace_ids: np.ndarray, positions: np.ndarray, length: int) -> np.ndarray:
        """(rows, length): the `length` tokens from each (trace, position) on, -1 past its trace's end."""
        row = np.searchsorted(self.trace_ids, trace_ids)
        at = positions.astype(np.int64)[:, None] + np.arange(length)[None, :]
        inside = at < self.sizes[row][:, None]
        return np.where(inside, self.flat[np.where(inside, self.starts[row][:, None] + at, 0)], -1)


def path_choices(contexts: pa.Table, tokens: np.ndarray) -> pa.Table:
    """(ctx_len, ctx_hash, rank) of each context's continuation on its most supported path, from
    its continuations' rows (ctx_len, ctx_hash, rank, count, in context and rank order) and their
    tokens (a row each, -1 past a continuation's end)."""
    n, width = tokens.shape
    if not n:
        return PATH_CHOICES_SCHEMA.empty_table()
    ctx_len = contexts.column("ctx_len").to_numpy()
    ctx_hash = contexts.column("ctx_hash").to_numpy()
    new_context = np.r_[True, (ctx_len[1:] != ctx_len[:-1]) | (ctx_hash[1:] != ctx_hash[:-1])]
    context = np.cumsum(new_context) - 1
    # a context's continuations sorted by their tokens: those sharing a first d tokens are
    # consecutive, and a shorter one comes before the longer ones it starts
    order, shared = prefix_order(tokens, context)
    tokens, context_sorted = tokens[order], context[order]
    count = contexts.column("count").to_numpy().astype(np.int64)[order]
    support = np.zeros((n, width), dtype=np.int64)
    for depth in range(width):
        starts = shared <= depth  # a new run of rows sharing the first depth + 1 tokens
        run = np.cumsum(starts) - 1
        sums = np.add.reduceat(count, np.flatnonzero(starts))
        support[:, depth] = np.where(tokens[:, depth] >= 0, sums[run], 0)
    rank = contexts.column("rank").to_numpy()[order]
    # per context: the greatest supports, element by element, then the lowest rank (the supports
    # subtracted from the largest, so that packed keys sort them greatest first)
    best = lexsort((rank, *packed_keys(support.max() - support), context_sorted))
    first = best[np.r_[True, context_sorted[best][1:] != context_sorted[best][:-1]]]
    at = order[first]
    return pa.table({"ctx_len": pa.array(ctx_len[at], pa.int32()), "ctx_hash": pa.array(ctx_hash[at], pa.int64()),
                     "rank": pa.array(rank[first], pa.int64())})
