"""Stage 6, --preset default: a confidence model that predicts each draft's accepted length.

The seed's policy scores a draft by its source's average on calibration. Here each draft gets
its own estimate from what is known when choosing (candidate_features.sql): its source family
and context length, how many other drafts agree with its first 1/2/4/8 tokens, and how long the
best in-trace and global matches at the position are. The model is a small gradient-boosted
tree ensemble fitted on the calibration split (no neural network); at each position the draft
with the highest estimate is chosen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.policy.draft_trees import AcceptanceCurves
from specdraft.policy.trees import TreeEnsemble
from specdraft.sources.tokenizer import Tokenizer
from specdraft.warehouse.connection import Warehouse, release_unused_memory

NUMERIC_FEATURES = (
    "ctx_len",
    "count",
    "copy_distance",
    "agree1",
    "agree2",
    "agree4",
    "agree8",
    "drafts_here",
    "longest_recent_copy",
    "longest_ngram",
    "longest_copy",
    "completion_pos",
    "distinct_tokens",
    "agree_recent_copy1",
    "agree_recent_copy4",
    "agree_ngram1",
    "agree_ngram4",
    # token ids: the draft's first and the last known (gsm8k-human 1.7881 -> 1.8576 every
    # position, development set 2.4327 -> 2.4363, in a lab refit; see the README)
    "first_token",
    "last_token",
)
# What the model predicts, known only once the trace's next tokens are: candidate_features carries
# it beside the features for fitting, and it must never be one of them (feature_columns refuses).
LABELS = ("accepted",)
# The drafts the policy chooses from (families.py): the second-latest recent copy, the second
# n-gram continuation and the seed's longest-only n-gram still count in the agreement features,
# but they are evidence, not choices.
SELECTABLE = families.SELECTABLE
# The drafts the model is fitted on and scores: the choices, and the evidence drafts that branch
# the token trees and multi-draft proposals (all but the seed's n-gram, ngram-all's twin). Fitted
# on these, the single pick among the choices held (2.4132 against 2.4121 fitted on the choices
# alone, in an offline refit on the development set).
IN_TREES = families.IN_TREES
# The live drafter scores every draft with these trees, so their number is a latency budget: 100
# trees choose as well as 200 did, with half the leaf masks to AND per draft (every position /
# decode step, development set 2.4126 / 0.9628 against 2.4095 / 0.9626; gsm8k-human 1.5668 /
# 1.0254 against 1.5658 / 1.0242).
TREES = 100
LEAVES = 63
SCORE_ROWS = 1 << 16  # drafts scored at a time


def feature_columns() -> tuple[str, ...]:
    """The model's input columns, in matrix order: the family (a category), then NUMERIC_FEATURES.

    A label among them would let the choice at a position read the trace after it; that is a bug
    in this file, so it fails every fit and prediction rather than quietly scoring better.

    >>> feature_columns()[:3]
    ('family', 'ctx_len', 'count')
    """
    columns = ("family", *NUMERIC_FEATURES)
    leaked = [name for name in columns if name in LABELS]
    if leaked:
        raise SpecdraftError(f"confidence model: {', '.join(leaked)} is the label it predicts, not a feature")
    return columns


def feature_matrix(features: pa.Table, dtype=np.int64) -> np.ndarray:
    """The model's input, one row per draft: int64 (every feature is a count), or float64 as
    sklearn reads it (the same values, exactly), filled column by column without an int copy."""
    _, *numeric_columns = feature_columns()
    out = np.empty((features.num_rows, 1 + len(numeric_columns)), dtype=dtype)
    if not features.num_rows:
        return out
    # each family's code looked up once per distinct name, not compared per row
    family = features.column("family").combine_chunks().dictionary_encode()
    lookup = np.array([families.ORDER.get(name, len(families.NAMES)) for name in family.dictionary.to_pylist()]
                      + [len(families.NAMES)], dtype=np.int64)  # the last: a null family
    out[:, 0] = lookup[family.indices.fill_null(len(family.dictionary)).to_numpy()]
    for j, name in enumerate(numeric_columns, start=1):
        out[:, j] = features.column(name).to_numpy(zero_copy_only=False)
    return out


@dataclass
class ConfidencePolicy:
    """Predicts accepted tokens per draft; fitted on calibration drafts (a policy.Policy:
    --preset default)."""

    families: ClassVar[tuple[str, ...]] = families.NAMES
    reads_features: ClassVar[bool] = True
    ngram_by_support: ClassVar[bool] = True
    slow_imports: ClassVar[tuple[str, ...]] = ("sklearn.ensemble",)

    model: object  # the fitted HistGradientBoostingRegressor, or None when there was nothing to learn
    calibration_drafts: int
    calibration_positions: int
    excluded: tuple[str, ...] = ()
    trees: TreeEnsemble | None = None  # the model as the bundle stores it (trees.py), checked equal
    curves: AcceptanceCurves | None = None  # how far drafts scored alike were accepted (token trees)

    @classmethod
    def fit(cls, features: pa.Table, draft_len: int, exclude_families: tuple[str, ...] = ()) -> ConfidencePolicy:
        """Fit on the calibration drafts of the IN_TREES families (less any excluded ones), and
        read the acceptance curves the token trees use off the same drafts' predictions."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        # only the columns read here, before the filter copies the rows
        keep = scored(features.select([*feature_columns(), *LABELS, "trace_id", "pos", "draft_key"]), exclude_families)
        del features  # (calibrate's only reference: the rest of its columns go)
        positions = keep.group_by(["trace_id", "pos"]).aggregate([]).num_rows
        # one row per draft at a position: a draft proposed by several sources is one proposal
        scorers = scoring_rows(position_ids(keep), keep.column("draft_key").to_numpy(),
                               selectable_rows(keep, exclude_families))
        keep = keep.filter(scorers == np.arange(keep.num_rows))
        accepted = keep.column("accepted").to_numpy().astype(np.float64)
        if keep.num_rows < 2 or accepted.sum() == 0:
            # nothing to learn from (and a Poisson fit needs some acceptance): every draft scores
            # the same, so ties keep the candidate order
            return cls(None, keep.num_rows, 0, tuple(exclude_families))
        model = HistGradientBoostingRegressor(
            max_iter=TREES,
            learning_rate=0.1,
            max_leaf_nodes=LEAVES,
            # accepted lengths are counts with a long tail at draft_len: a Poisson loss ranks
            # drafts better than squared error (2.405 vs 2.392 on the development set)
            loss="poisson",
            categorical_features=[0],
            early_stopping=False,  # deterministic: no random validation split
            random_state=0,  # the bin thresholds come from a sample of the rows
        )
        rows = keep.num_rows
        matrix = feature_matrix(keep, np.float64)  # as sklearn reads it: no copy of it in fit()
        del keep
        release_unused_memory()  # the Arrow tables' pages, before sklearn's arrays are made
        with fitted_predictions() as kept:
            model.fit(matrix, accepted)
        trees = exported_trees(model, matrix)
        curves = AcceptanceCurves.fit(training_predictions(model, matrix, kept), accepted, draft_len)
        return cls(model, rows, positions, tuple(exclude_families), trees, curves)

    @classmethod
    def calibrate(cls, wh: Warehouse, cfg: RunConfig) -> ConfidencePolicy:
        return cls.fit(calibration_features(wh), cfg.draft_len)

    def score(self, drafts: pa.Table, wanted: np.ndarray | None = None) -> np.ndarray:
        """The model's raw (log-scale) prediction of each draft's accepted length: what the pick
        compares, here and live (ranking by exp of it would be the same but for float ties).
        wanted: a mask of the drafts to score (default: every draft); their predictions, in order."""
        count = drafts.num_rows if wanted is None else int(np.count_nonzero(wanted))
        if count == 0 or self.model is None:
            return np.zeros(count)
        # a slice at a time: the feature matrix and sklearn's copies of it stay small (each row's
        # prediction is its own, so slicing changes no value); the slices are the table's own
        # (taking the wanted rows out of it first copied every feature column: 0.4 s on the
        # development set's eval drafts)
        predicted = []
        for start in range(0, drafts.num_rows, SCORE_ROWS):
            matrix = feature_matrix(drafts.slice(start, SCORE_ROWS))
            if wanted is not None:
                matrix = matrix[wanted[start : start + SCORE_ROWS]]
            if len(matrix):
                predicted.append(raw_predict(self.model, matrix))
        return np.concatenate(predicted)

    def model_table(self) -> pa.Table | None:
        """The trees as a node table (trees.NODE_COLUMNS), recorded with the run for export."""
        return None if self.trees is None else self.trees.nodes

    def evaluate(self, wh: Warehouse, cfg: RunConfig, tokenizer: Tokenizer, traces_path: Path):
        from specdraft.policy.evaluate import evaluate_confidence

        return evaluate_confidence(wh, cfg, self, exclude_families=self.excluded)

    def leave_one_out(self, wh: Warehouse, cfg: RunConfig, results: dict) -> dict:
        """Refit and re-evaluate without each selectable source that proposed drafts in eval."""
        from specdraft.report.results import summarize

        full = results["selected"]["avg_accepted"]
        features = calibration_features(wh)
        table = {}
        for family in SELECTABLE:
            if family not in results["per_source"]:
                continue
            without = ConfidencePolicy.fit(features, cfg.draft_len, exclude_families=(family,))
            avg = summarize(without.evaluate(wh, cfg, None, None).selected, cfg.draft_len)["avg_accepted"]
            table[family] = {"selected_without": avg, "marginal": full - avg}
        return table

    def to_dict(self) -> dict:
        return {
            "kind": "gradient-boosted trees (Poisson loss) on per-draft features",
            "choices": [f for f in SELECTABLE if f not in self.excluded],
            # the families it scores: the choices, and the drafts that only branch token trees
            "scored": [f for f in IN_TREES if f not in self.excluded],
            # fitted on, and scoring, one row per distinct draft at a position (scoring_rows)
            "scoring": "per-draft",
            "trees": TREES,
            "leaves": LEAVES,
            # how its n-gram drafts were chosen (ngram_choices.sql), which export chooses again
            "ngram_choice": "support" if self.ngram_by_support else "count",
            "features": list(feature_columns()),
            "calibration_drafts": self.calibration_drafts,
            "calibration_positions": self.calibration_positions,
            # the raw prediction's constant term; the trees are the run's policy_trees rows
            "baseline": None if self.trees is None else self.trees.baseline,
            # the token trees' chance per draft and depth (draft_trees.py), by raw prediction bin
            "acceptance_curves": None if self.curves is None else self.curves.to_dict(),
        }


def position_ids(drafts: pa.Table) -> np.ndarray:
    """Each draft row's position as a number, rows in (trace_id, pos) order."""
    trace_ids, positions = drafts.column("trace_id").to_numpy(), drafts.column("pos").to_numpy()
    if not len(trace_ids):
        return np.zeros(0, dtype=np.int64)
    return np.cumsum(np.r_[False, (trace_ids[1:] != trace_ids[:-1]) | (positions[1:] != positions[:-1])])


def scoring_rows(positions: np.ndarray, draft_keys: np.ndarray, choosable: np.ndarray) -> np.ndarray:
    """Each draft row's scorer: the row whose features score its draft. Of the rows at a position
    with the same draft (draft_key), that is the first choosable one, else the first (rows in
    (position, family order, context length) order, as the pick reads them). Sources that propose
    the same tokens make one proposal: the model is fitted on, and scores, one row per draft, and
    every copy of the draft gets that row's score (the README gives what fitting every copy gave:
    much the same choices, for 1.7x the rows).

    >>> scoring_rows(np.array([0, 0, 0, 1]), np.array([7, 9, 7, 7]), np.array([False, True, True, True])).tolist()
    [2, 1, 2, 3]
    """
    rows = np.arange(len(positions))
    if not len(rows):
        return rows
    order = np.lexsort((rows, ~choosable, draft_keys, positions))
    at, key = positions[order], draft_keys[order]
    starts = np.flatnonzero(np.r_[True, (at[1:] != at[:-1]) | (key[1:] != key[:-1])])
    scorers = np.empty(len(rows), dtype=np.int64)
    scorers[order] = np.repeat(order[starts], np.diff(np.r_[starts, len(rows)]))
    return scorers


def raw_predict(model, matrix: np.ndarray) -> np.ndarray:
    """sklearn's raw prediction (before the Poisson link's exp): its own compiled tree walk, fast
    over a whole split. It is a private method; exported_trees() checks every fit against it, so a
    change in sklearn fails the run rather than the bundle.

    The trees walk the rows binned as the fit binned them (one byte a value), as sklearn walks its
    training rows, not the float rows: the same leaves (a value is at most a split's threshold
    exactly where its bin is at most the split's bin) and the same sum in the same order, so the
    same floats, in three quarters of the time (505,054 development-set drafts: 1.25 s against
    1.70 s)."""
    from sklearn.utils._openmp_helpers import _openmp_effective_n_threads

    rows = model_rows(model, matrix)
    mapper = model._bin_mapper
    binned = mapper.transform(rows)
    raw = np.zeros(len(rows), dtype=model._baseline_prediction.dtype)
    raw += model._baseline_prediction[0]  # as _raw_predict: zeros, the baseline, then tree by tree
    n_threads = _openmp_effective_n_threads()
    for (tree,) in model._predictors:
        raw += tree.predict_binned(binned, mapper.missing_values_bin_idx_, n_threads)
    return raw


@contextmanager
def fitted_predictions() -> Iterator[list[np.ndarray]]:
    """Keep the raw predictions a HistGradientBoostingRegressor fit inside the block makes of its
    own training rows (the list gets the array, which sklearn updates tree by tree): what
    raw_predict would give of them again, in 0.95 s on the development set's 490,338 calibration
    drafts. sklearn's private _update_raw_predictions is wrapped for the block's length (fits
    outside it are untouched); a sklearn without it keeps nothing, and training_predictions then
    predicts."""
    from sklearn.ensemble._hist_gradient_boosting import gradient_boosting

    kept: list[np.ndarray] = []
    update = getattr(gradient_boosting, "_update_raw_predictions", None)
    if update is None:
        yield kept
        return

    def keeping(raw, *args, **kwargs):
        if not kept:
            kept.append(raw)
        return update(raw, *args, **kwargs)

    gradient_boosting._update_raw_predictions = keeping
    try:
        yield kept
    finally:
        gradient_boosting._update_raw_predictions = update


def training_predictions(model, matrix: np.ndarray, kept: list[np.ndarray], sample: int = 4096) -> np.ndarray:
    """The fitted model's raw predictions of its training rows: those the fit kept
    (fitted_predictions) where they equal raw_predict's bit for bit on a sample of the rows (the
    same baseline and trees, added in the same order), else raw_predict's."""
    if kept and kept[0].shape == (len(matrix),):
        rows = np.linspace(0, len(matrix) - 1, min(sample, len(matrix))).astype(np.int64)
        if np.array_equal(kept[0][rows], raw_predict(model, matrix[rows])):
            return np.asarray(kept[0])
    return raw_predict(model, matrix)


def model_rows(model, matrix: np.ndarray) -> np.ndarray:
    """The rows as sklearn's _raw_predict prepares them (_preprocess_X): float64, with the family
    codes (column 0, the one categorical feature) as the fit's category indices, a family it never
    saw a missing value (NaN). Its ColumnTransformer makes them with an encoder and a copy of the
    numeric columns, stacked: 0.43 s of the development set's 942,397 eval drafts, against 0.05 s
    here. exported_trees checks every fit's predictions against sklearn's own _raw_predict."""
    rows = np.array(matrix, dtype=np.float64, order="C")  # a copy: column 0 is rewritten
    if not len(rows):
        return rows
    encoder = model._preprocessor.named_transformers_["encoder"]
    if list(model.is_categorical_) != [True] + [False] * (rows.shape[1] - 1) or len(encoder.categories_) != 1:
        raise SpecdraftError("confidence model: expected the family (column 0) as its one categorical feature")
    categories = np.asarray(encoder.categories_[0], dtype=np.float64)  # sorted, as OrdinalEncoder keeps them
    family = rows[:, 0]
    at = np.minimum(np.searchsorted(categories, family), len(categories) - 1)
    rows[:, 0] = np.where(categories[at] == family, at, np.nan)
    return rows


def exported_trees(model, matrix: np.ndarray, sample: int = 4096) -> TreeEnsemble:
    """The fitted model as a TreeEnsemble, after checking that it predicts bit for bit what sklearn
    does on (a sample of) the training rows: the live drafter scores with it."""
    trees = TreeEnsemble.from_sklearn(model)
    rows = matrix[np.linspace(0, len(matrix) - 1, min(sample, len(matrix))).astype(np.int64)]
    # sklearn's own prediction (its _preprocess_X too, model_rows' reference), here and below
    expected = model._raw_predict(rows)[:, 0]
    if not (np.array_equal(trees.raw_predict(rows), expected) and np.array_equal(raw_predict(model, rows), expected)):
        raise SpecdraftError("confidence model: the exported trees do not predict what sklearn predicts "
                             "(has HistGradientBoostingRegressor's tree layout changed?)")
    return trees


def selectable(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> pa.Table:
    """The rows the policy may choose: SELECTABLE families, less any excluded (leave-one-out)."""
    return features.filter(selectable_rows(features, exclude_families))


def selectable_rows(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> np.ndarray:
    """Which rows selectable() keeps, as a mask."""
    return _in_families(features, [f for f in SELECTABLE if f not in exclude_families])


def scored(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> pa.Table:
    """The rows the model is fitted on and scores: IN_TREES families, less any excluded."""
    return features.filter(_in_families(features, [f for f in IN_TREES if f not in exclude_families]))


def _in_families(features: pa.Table, names: list[str]) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.is_in(features.column("family"), pa.array(names)).to_numpy(zero_copy_only=False)


def calibration_features(wh: Warehouse) -> pa.Table:
    return wh.query("policy/calibration_features").to_arrow_table()

