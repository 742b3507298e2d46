"""Token trees: the drafts at a position merged into one prefix tree of at most `budget` tokens,
which a tree verifier (SuffixDecoding, SGLang, vLLM) checks in one forward pass.

A tree's accepted length is its longest path that matches the trace: a node counts once the path
to it is accepted. So its expected accepted length is the sum, over its nodes, of the chance that
the node's path matches, and the best tree under a budget is the `budget` nodes most likely to
match. A draft's chance of being accepted to at least j tokens is read from calibration
(AcceptanceCurves): among the calibration drafts whose raw prediction fell in the same quantile
bin, the fraction accepted to j or more. A node shared by several drafts takes the highest of
their chances. No node is more likely than its parent (its parent's drafts include its own, and
each curve falls with j), so the `budget` likeliest nodes, ties to the shallower and then to the
node of the earlier draft in candidate order, always form a tree.

best_tree() builds one position's tree (the live drafter's session.propose_tree);
tree_holdings() builds every eval position's at once, in numpy, with the same choice, and
tree_accepted() scores them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from specdraft.config import NUMPY_THREADS
from specdraft.errors import SpecdraftError
from specdraft.policy.runs import rank_in_runs, run_starts
from specdraft.tables.hashing import key_order, prefix_order

TREE_BUDGETS = (16, 32, 64)  # tokens per tree, reported as tree_b16, tree_b32, tree_b64
TREE_DRAFTS = 8  # a tree is built from the position's best distinct drafts, at most this many
CURVE_BINS = 128  # quantile bins of the raw prediction (see AcceptanceCurves)
# eval drafts whose trees are made at a time (each becomes draft_len nodes), a chunk a thread: the
# development set's trees took 0.45 s in chunks of 8k-32k drafts, 0.56 s in 64k, and two smaller
# chunks hold less than one larger
CHUNK_ROWS = 1 << 14
_PRIME = np.uint64(1_000_003)  # the node ids' polynomial hash (wraps mod 2^64)


@dataclass(frozen=True)
class AcceptanceCurves:
    """survival[b, j]: the chance that a draft whose raw prediction lies in bin b (edges: the
    bins' upper bounds but the last) is accepted to at least j + 1 tokens."""

    edges: np.ndarray  # (bins - 1,) float64, increasing
    survival: np.ndarray  # (bins, draft_len) float64, falling along each row

    @classmethod
    def fit(cls, raw: np.ndarray, accepted: np.ndarray, draft_len: int, bins: int = CURVE_BINS) -> AcceptanceCurves:
        """From the calibration drafts' raw predictions and accepted lengths."""
        raw = np.asarray(raw, dtype=np.float64)
        accepted = np.asarray(accepted, dtype=np.int64)
        if not len(raw):
            return cls(np.zeros(0), np.zeros((1, draft_len)))
        edges = np.unique(np.quantile(raw, np.arange(1, bins) / bins))
        which = np.searchsorted(edges, raw, side="right")
        n_bins = len(edges) + 1
        drafts = np.bincount(which, minlength=n_bins).astype(np.float64)
        survival = np.zeros((n_bins, draft_len))
        for j in range(draft_len):
            survival[:, j] = np.bincount(which, weights=accepted > j, minlength=n_bins)
        return cls(edges, survival / np.maximum(drafts, 1.0)[:, None])

    def chances(self, raw: np.ndarray) -> np.ndarray:
        """(n, draft_len): each draft's chance of being accepted to at least 1, 2, ... tokens."""
        return self.survival[self.bins(raw)]

    def bins(self, raw: np.ndarray) -> np.ndarray:
        """The bin of each raw prediction (a row of survival)."""
        return np.searchsorted(self.edges, np.asarray(raw, dtype=np.float64), side="right")

    def to_dict(self) -> dict:
        return {"edges": self.edges.tolist(), "survival": self.survival.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> AcceptanceCurves:
        edges = np.asarray(data["edges"], dtype=np.float64)
        survival = np.asarray(data["survival"], dtype=np.float64)
        if survival.ndim != 2 or len(survival) != len(edges) + 1:
            raise SpecdraftError(f"acceptance curves: {len(edges)} edges for {len(survival)} bins")
        return cls(edges, survival)


@dataclass(frozen=True)
class TokenTree:
    """A draft tree in SuffixDecoding's shape: token_ids[i]'s parent is token_ids[parents[i]]
    (-1: the node follows the known text), every parent before its children; probs[i] is the
    chance that the path to node i is accepted."""

    token_ids: list[int]
    parents: list[int]
    probs: list[float]

    def accepted(self, actual: list[int]) -> int:
        """The longest path that matches `actual` (the tokens that follow)."""
        matched = [0] * len(self.token_ids)  # the matched path's length to each node (0: not matched)
        for i, (token, parent) in enumerate(zip(self.token_ids, self.parents)):
            at = 0 if parent < 0 else matched[parent]
            if (parent < 0 or at > 0) and at < len(actual) and actual[at] == token:
                matched[i] = at + 1
        return max(matched, default=0)


def best_tree(curves: AcceptanceCurves, drafts: list[list[int]], raw: list[float], budget: int) -> TokenTree:
    """The `budget` likeliest nodes of the drafts' prefix tree (drafts in candidate order)."""
    if not drafts:
        return TokenTree([], [], [])
    chances = curves.chances(np.asarray(raw)).tolist()
    # the prefix tree, a node per (parent node, token): its parent, token, chance (the highest of
    # the drafts through it), depth and first draft
    nodes: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    token_of: list[int] = []
    chance_of: list[float] = []
    depth_of: list[int] = []
    first: list[int] = []
    for row, (draft, chance) in enumerate(zip(drafts, chances)):
        at = -1
        for depth, token in enumerate(draft, start=1):
            node = nodes.get((at, token))
            if node is None:
                node = nodes[(at, token)] = len(parent)
                parent.append(at)
                token_of.append(token)
                chance_of.append(chance[depth - 1])
                depth_of.append(depth)
                first.append(row)
            elif chance[depth - 1] > chance_of[node]:
                chance_of[node] = chance[depth - 1]
            at = node
    # likeliest first, then shallower, then earlier draft: a parent (as likely as its likeliest
    # child, and shallower) comes before its children
    chosen = sorted(range(len(parent)), key=lambda i: (-chance_of[i], depth_of[i], first[i]))[:budget]
    index: dict[int, int] = {}
    tree = TokenTree([], [], [])
    for node in chosen:
        index[node] = len(tree.token_ids)
        tree.token_ids.append(token_of[node])
        tree.parents.append(index[parent[node]] if parent[node] >= 0 else -1)
        tree.probs.append(chance_of[node])
    return tree


def tree_holdings(curves: AcceptanceCurves, raw: np.ndarray, flat: np.ndarray, drafts: pa.ListArray,
                  budgets: tuple[int, ...]) -> dict[int, np.ndarray]:
    """Per budget, how many of each draft's tokens its position's best tree holds (the tree is the
    union of those prefixes). Rows are drafts grouped by flat position, in candidate order within
    one; drafts holds their tokens. What is known when drafting only: no accepted lengths."""
    held = {budget: np.zeros(len(flat), dtype=np.int64) for budget in budgets}
    chunks = list(pairwise(_chunk_bounds(run_starts(flat), len(flat))))
    # the chunks' trees are numpy work (which lets go of the GIL), made side by side: the
    # development set's eval trees in 0.45 s against 0.85 s
    with ThreadPoolExecutor(max_workers=NUMPY_THREADS, thread_name_prefix="token-trees") as pool:
        made = pool.map(lambda chunk: _chunk_holdings(curves, raw[chunk[0]:chunk[1]], flat[chunk[0]:chunk[1]],
                                                      drafts[chunk[0]:chunk[1]], budgets), chunks)
        for (lo, hi), holdings in zip(chunks, made, strict=True):
            for budget, values in holdings.items():
                held[budget][lo:hi] = values
    return held


def tree_accepted(accepted: np.ndarray, flat: np.ndarray, held: np.ndarray, n_positions: int) -> np.ndarray:
    """Every eval position's tree's accepted length (0 where it has no drafts): its longest
    matching path, the most any of its drafts gets within what the tree holds of it."""
    out = np.zeros(n_positions, dtype=np.int64)
    if len(flat):
        starts = run_starts(flat)
        out[flat[starts]] = np.maximum.reduceat(np.minimum(accepted, held), starts)
    return out


def _chunk_bounds(starts: np.ndarray, n_rows: int) -> list[int]:
    """Row bounds of chunks of about CHUNK_ROWS rows that never split a position."""
    bounds, last = [0], 0
    for start in starts.tolist():
        if start - last >= CHUNK_ROWS:
            bounds.append(start)
            last = start
    return [*bounds, n_rows]


def _bits(n: int) -> int:
    """Bits that hold 0 .. n - 1."""
    return max(int(n - 1).bit_length(), 1)


def _chunk_holdings(curves, raw, flat, drafts, budgets) -> dict[int, np.ndarray]:
    """Per budget, how many of each row's tokens its position's tree holds.

    The rows are sorted by position and then token by token, so the drafts sharing a node are
    consecutive: at depth j, a row starts a new node unless it shares its first j tokens with the
    row before (their common prefix, `shared`), and each node's chance (the highest) and first
    draft (the lowest row) are reductions over its run of rows. Chances are survival values, a few
    hundred distinct floats, so each is carried as its rank among them (0 the likeliest): the
    highest chance is the lowest rank, and the ranks order the nodes exactly.
    """
    n = len(flat)
    width = curves.survival.shape[1]
    lengths = pc.list_value_length(drafts).fill_null(0).to_numpy().astype(np.int64)
    if len(lengths) and lengths.max() > width:
        raise SpecdraftError(f"token trees: a draft of {lengths.max()} tokens; the curves end at {width}")
    tokens = np.full((n, width), -1, dtype=np.int64)
    rows = np.repeat(np.arange(n), lengths)
    tokens[rows, np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = (
        pc.list_flatten(drafts).to_numpy())
    order, shared = prefix_order(tokens, flat)
    lengths, position = lengths[order], flat[order]
    levels = np.unique(curves.survival)
    level_rank = len(levels) - 1 - np.searchsorted(levels, curves.survival)  # (bins, width)
    row_chance = level_rank[np.searchsorted(curves.edges, raw[order], side="right")]
    exists = np.arange(width)[None, :] < lengths[:, None]
    local = np.cumsum(np.r_[0, position[1:] != position[:-1]])  # each row's position, numbered 0, 1, ...
    # the nodes, depth by depth: the row that starts each, its chance, first draft and position
    node_of = np.full((n, width), -1, dtype=np.int64)
    chance, first, depth, where = [], [], [], []
    total = 0
    for j in range(width):
        starts_node = exists[:, j] & (shared <= j)
        starts = np.flatnonzero(starts_node)
        if not len(starts):
            break
        # rows past a draft's end sit in the run before them: they must not count
        chance.append(np.minimum.reduceat(np.where(exists[:, j], row_chance[:, j], len(levels)), starts))
        first.append(np.minimum.reduceat(np.where(exists[:, j], order, n), starts))
        depth.append(np.full(len(starts), j + 1, dtype=np.int64))
        where.append(local[starts])
        node_of[:, j] = np.where(exists[:, j], total + np.cumsum(starts_node) - 1, -1)
        total += len(starts)
    chance, first, depth, where = (np.concatenate(parts) for parts in (chance, first, depth, where))
    # rank the nodes within each position: likeliest first, then shallower, then earlier draft,
    # in one int64 key
    row_bits, depth_bits, chance_bits = _bits(n + 1), _bits(width + 1), _bits(len(levels))
    key = (((where << chance_bits | chance) << depth_bits | depth) << row_bits) | first
    ranked = key_order(key)  # the keys are distinct: the same order as np.argsort, 3x faster
    rank = np.empty(len(ranked), dtype=np.int64)
    rank[ranked] = rank_in_runs(run_starts(where[ranked]), len(ranked))
    out = {}
    unsort = np.empty(n, dtype=np.int64)
    unsort[order] = np.arange(n)
    for budget in budgets:
        out[budget] = ((rank[node_of] < budget) & (node_of >= 0)).sum(axis=1)[unsort]
    return out

