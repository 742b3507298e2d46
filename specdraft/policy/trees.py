"""The confidence model's trees as plain arrays: what a drafter bundle stores, and how the live
drafter scores a handful of drafts in microseconds.

A fitted HistGradientBoostingRegressor is turned into one node table (NODE_COLUMNS): per node its
tree, feature column, threshold, children and leaf value. The family (feature 0) is categorical:
instead of sklearn's bitsets over its ordinal encoding, a node stores `left_codes`, the mask of
family codes (families.ORDER) that go left, with sklearn's rules for unknown categories folded in.
Every feature is an integer count, so `x <= threshold` is `x <= floor(threshold)`, and the node
table is all a scorer needs: loading a bundle runs no code from it (no pickle).

The raw prediction is the baseline plus the leaf values of the trees, added in tree order, as
sklearn's _raw_predict adds them: bit for bit the same float. The live scorer finds the leaves the
QuickScorer way (Lucchese et al., SIGIR 2015), vectorised with numpy: a tree has at most 64
leaves, numbered left to right; a node whose test fails removes the leaves of its left subtree
from a 64-bit mask, and the exit leaf is the lowest bit left. Per feature the failing nodes are
those with a threshold below the value, so the AND of their masks is precomputed per threshold:
scoring n drafts is one searchsorted, one gather of n x features rows of masks, one AND and a
popcount, tens of microseconds for a position's drafts, where a walk down 100 trees in Python
takes milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from specdraft.errors import SpecdraftError

NODE_COLUMNS = ("tree", "node", "feature", "threshold", "left_codes", "left", "right", "value")
MAX_LEAVES = 64  # one uint64 mask per tree
MAX_CODES = 64  # family codes a left_codes mask can hold
FEATURE_SPAN = 1 << 40  # one searchsorted over every feature: feature * SPAN + value
VALUE_LIMIT = (1 << 39) - 1  # values are clipped to +-VALUE_LIMIT; every threshold lies inside
ALL_LEAVES = np.uint64((1 << 64) - 1)
ONE = np.uint64(1)


# Rows scored at a time: each row gathers a mask per feature and tree (14 KB at 18 features and 100
# trees), so a few dozen rows keep the gather in cache. 100,000 development-set calibration drafts:
# 0.18 s in chunks of 64 against 0.63 s in chunks of 4,096 (sklearn's own walk: 0.18 s); the live
# drafter's positions (a few dozen drafts) are one chunk either way.
SCORE_CHUNK = 64


@dataclass(frozen=True)
class TreeEnsemble:
    """baseline + the sum of one leaf value per tree; `nodes` has NODE_COLUMNS (see the module
    docstring). Immutable once built: safe to share between threads."""

    baseline: float
    nodes: pa.Table
    n_features: int
    _scorer: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_scorer", _quickscorer(self.nodes, self.n_features, self.baseline))

    @classmethod
    def from_sklearn(cls, model) -> TreeEnsemble:
        """The node table of a fitted HistGradientBoostingRegressor whose column 0 is categorical
        (raw family codes) and whose other columns are integer counts."""
        encoded = _family_encoding(model)
        known_bitsets, feature_rows = model._bin_mapper.make_known_categories_bitsets()
        columns: dict[str, list] = {name: [] for name in NODE_COLUMNS}
        for tree, (predictor,) in enumerate(model._predictors):
            nodes = predictor.nodes
            for i, node in enumerate(nodes):
                leaf = bool(node["is_leaf"])
                left_codes = 0
                if not leaf and node["is_categorical"]:
                    known = known_bitsets[feature_rows[node["feature_idx"]]]
                    goes_left = predictor.raw_left_cat_bitsets[node["bitset_idx"]]
                    for code in range(MAX_CODES):
                        if _goes_left(code, encoded, goes_left, known, bool(node["missing_go_to_left"])):
                            left_codes |= 1 << code
                columns["tree"].append(tree)
                columns["node"].append(i)
                columns["feature"].append(-1 if leaf else int(node["feature_idx"]))
                columns["threshold"].append(0.0 if leaf or node["is_categorical"] else float(node["num_threshold"]))
                columns["left_codes"].append(left_codes - (1 << 64) if left_codes >= 1 << 63 else left_codes)
                columns["left"].append(-1 if leaf else int(node["left"]))
                columns["right"].append(-1 if leaf else int(node["right"]))
                columns["value"].append(float(node["value"]) if leaf else 0.0)
        types = {"tree": pa.int32(), "node": pa.int32(), "feature": pa.int32(), "threshold": pa.float64(),
                 "left_codes": pa.int64(), "left": pa.int32(), "right": pa.int32(), "value": pa.float64()}
        table = pa.table({name: pa.array(values, types[name]) for name, values in columns.items()})
        return cls(float(np.asarray(model._baseline_prediction).ravel()[0]), table, model.n_features_in_)

    def raw_predict(self, features: np.ndarray) -> np.ndarray:
        """The raw (log-scale) prediction of each row of an integer feature matrix (n x
        n_features), in chunks that keep the mask gather small."""
        features = np.asarray(features)
        if features.ndim != 2 or features.shape[1] != self.n_features:
            raise ValueError(f"expected an n x {self.n_features} feature matrix, got shape {features.shape}")
        features = features.astype(np.int64, copy=False)
        if len(features) and (features[:, 0].min() < 0 or features[:, 0].max() >= MAX_CODES
                              or np.abs(features[:, 1:]).max(initial=0) > VALUE_LIMIT):
            raise ValueError(f"family codes must be 0 to {MAX_CODES - 1} and counts within +-{VALUE_LIMIT}")
        return self.raw_predict_checked(features)

    def raw_predict_checked(self, features: np.ndarray) -> np.ndarray:
        """raw_predict() of an int64 matrix already known to be in range (the live drafter's:
        family codes from families.ORDER, counts of tokens)."""
        if len(features) <= SCORE_CHUNK:
            return _score(self._scorer, features)
        return np.concatenate([_score(self._scorer, features[i : i + SCORE_CHUNK])
                               for i in range(0, len(features), SCORE_CHUNK)])

    @property
    def n_trees(self) -> int:
        return len(self._scorer["leaf_base"])


def _family_encoding(model) -> dict[int, int]:
    """code -> the value sklearn's trees see: it encodes a categorical column ordinally (its
    known categories, sorted), and unknown codes become missing."""
    preprocessor = getattr(model, "_preprocessor", None)
    if preprocessor is None:  # sklearn < 1.4: the raw codes are the encoding
        return {code: code for code in range(MAX_CODES)}
    categories = preprocessor.named_transformers_["encoder"].categories_[0]
    return {int(code): i for i, code in enumerate(np.asarray(categories).tolist())}


def _goes_left(code: int, encoded: dict[int, int], left_bitset, known_bitset, missing_left: bool) -> bool:
    """sklearn's _predictor.pyx rule for one categorical node: a known category goes left if its
    bit is in the node's bitset; unknown ones go where missing values go."""
    value = encoded.get(code)
    if value is None:
        return missing_left
    word, bit = divmod(value, 32)
    if (int(left_bitset[word]) >> bit) & 1:
        return True
    if (int(known_bitset[word]) >> bit) & 1:
        return False
    return missing_left


def _quickscorer(nodes: pa.Table, n_features: int, baseline: float) -> dict:
    """The per-threshold leaf masks (see the module docstring), from the node table."""
    columns = {name: nodes.column(name).to_numpy() for name in NODE_COLUMNS}
    if len(columns["tree"]) == 0:
        raise SpecdraftError("the tree ensemble has no nodes")
    trees = columns["tree"]
    tree_start = np.flatnonzero(np.r_[True, trees[1:] != trees[:-1]])
    n_trees = len(tree_start)
    if not np.array_equal(trees[tree_start], np.arange(n_trees)):
        raise SpecdraftError("the tree ensemble's nodes are not grouped by tree 0, 1, 2, ...")
    leaf_values = np.zeros((n_trees, MAX_LEAVES))
    # per numeric feature: (integer threshold, tree, mask); per tree: family code -> failing mask
    numeric: list[list[tuple[int, int, int]]] = [[] for _ in range(n_features)]
    family_masks = np.full((MAX_CODES, n_trees), ALL_LEAVES, dtype=np.uint64)
    bounds = np.r_[tree_start, len(trees)]
    for tree in range(n_trees):
        lo, hi = int(bounds[tree]), int(bounds[tree + 1])
        tree_nodes = {name: columns[name][lo:hi].tolist() for name in NODE_COLUMNS}
        values, splits = _leaves_and_splits(tree, tree_nodes)
        leaf_values[tree, : len(values)] = values
        for feature, threshold, codes, fails in splits:
            if feature == 0:
                for code in range(MAX_CODES):
                    if not (codes >> code) & 1:
                        family_masks[code, tree] &= np.uint64(fails)
            elif feature >= n_features or abs(threshold) >= VALUE_LIMIT:
                raise SpecdraftError(f"tree {tree}: a split on feature {feature} at {threshold} is out of range")
            else:
                numeric[feature].append((int(np.floor(threshold)), tree, fails))
    # one table of masks and one sorted array of thresholds for every feature, feature f's
    # thresholds offset by f * FEATURE_SPAN and followed by a bound above any of its values (f *
    # SPAN + VALUE_LIMIT + 1, below any of feature f + 1's): for a value x of feature f,
    # searchsorted counts the thresholds and bounds below f * SPAN + x, which is f's rows before
    # it plus its thresholds below x, so the count is x's row. A numeric feature's row k is the AND
    # of the masks of its splits among its k smallest thresholds; the family's thresholds are 0 ..
    # MAX_CODES - 2, so a code's count is the code, and its row that code's failing splits.
    tables = [family_masks]
    thresholds = [np.r_[np.arange(MAX_CODES - 1), VALUE_LIMIT + 1].astype(np.int64)]
    for f in range(1, n_features):
        distinct = sorted({t for t, _, _ in numeric[f]})
        index = {t: k + 1 for k, t in enumerate(distinct)}
        table = np.full((len(distinct) + 1, n_trees), ALL_LEAVES, dtype=np.uint64)
        for t, tree, fails in numeric[f]:
            table[index[t], tree] &= np.uint64(fails)
        tables.append(np.bitwise_and.accumulate(table, axis=0))
        thresholds.append(f * FEATURE_SPAN + np.array([*distinct, VALUE_LIMIT + 1], dtype=np.int64))
    leaf_values[0] += baseline  # what sklearn's first addition gives, once
    return {
        "masks": np.ascontiguousarray(np.vstack(tables)),
        "thresholds": np.concatenate(thresholds),
        "feature_base": np.arange(n_features, dtype=np.int64) * FEATURE_SPAN,
        "leaf_values": leaf_values.ravel(),
        # a leaf's value is at tree * MAX_LEAVES + its number, and the popcount below is number + 1
        "leaf_base": np.arange(n_trees, dtype=np.int64) * MAX_LEAVES - 1,
    }


def _leaves_and_splits(tree: int, nodes: dict[str, list]) -> tuple[list[float], list[tuple[int, float, int, int]]]:
    """One tree's leaf values, numbered left to right, and per split (feature, threshold,
    left_codes, the mask of the leaves left when its test fails: all but its left subtree's)."""
    values: list[float] = []
    splits: list[tuple[int, float, int, int]] = []
    left, right = nodes["left"], nodes["right"]

    def number(i: int, depth: int) -> tuple[int, int]:
        """The bit range of the leaves under node i."""
        if depth > len(left):
            raise SpecdraftError(f"tree {tree}: the node links form a cycle")
        if left[i] < 0:
            if len(values) == MAX_LEAVES:
                raise SpecdraftError(f"tree {tree}: more than {MAX_LEAVES} leaves")
            values.append(nodes["value"][i])
            return len(values) - 1, len(values)
        first, middle = number(left[i], depth + 1)
        _, last = number(right[i], depth + 1)
        fails = ((1 << 64) - 1) ^ (((1 << (middle - first)) - 1) << first)
        splits.append((nodes["feature"][i], nodes["threshold"][i], nodes["left_codes"][i], fails))
        return first, last

    number(0, 0)
    return values, splits


def _score(scorer: dict, features: np.ndarray) -> np.ndarray:
    """Each row's baseline + exit-leaf values, added in tree order, as sklearn adds them (the
    baseline is folded into tree 0's leaves: the same first addition). The values are laid out
    trees x rows, and numpy reduces over an outer axis one row after another (pairwise summation
    is only for the contiguous axis), so each row's sum is sequential; a single row is padded to
    two, or it would be the contiguous axis."""
    single = len(features) == 1
    if single:
        features = np.concatenate([features, features])
    rows = scorer["thresholds"].searchsorted(features + scorer["feature_base"])  # the method: no dispatch wrapper
    masks = np.bitwise_and.reduce(scorer["masks"].take(rows, axis=0), axis=1)
    # the lowest bit left is the exit leaf: masks ^ (masks - 1) sets it and the bits below
    masks ^= masks - ONE
    exit_leaf = np.bitwise_count(masks)
    values = scorer["leaf_values"].take((exit_leaf + scorer["leaf_base"]).T)
    total = np.add.reduce(values, axis=0)
    return total[:1] if single else total
