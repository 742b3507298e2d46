"""Stage 6, --preset default: a confidence model that predicts each draft's accepted length.

The seed's policy scores a draft by its source's average on calibration. Here each draft gets
its own estimate from what is known when choosing (candidate_features.sql): its source family
and context length, how many other drafts agree with its first 1/2/4/8 tokens, and how long the
best in-trace and global matches at the position are. The model is a small gradient-boosted
tree ensemble fitted on the calibration split (no neural network); at each position the draft
with the highest estimate is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.policy.draft_trees import AcceptanceCurves
from specdraft.policy.runs import best_in_runs, run_starts
from specdraft.policy.trees import TreeEnsemble
from specdraft.sources.tokenizer import Tokenizer
from specdraft.tables.hashing import lexsort
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
    # and four more, the draft's second and third and the two known before the last (development
    # set 2.4372 / 0.9923 -> 2.4419 / 0.9927, gsm8k-human 1.8533 / 1.1966 -> 1.8712 / 1.2029 in a
    # lab refit; see the README). Appended: an older bundle's model reads the columns before them.
    "second_token",
    "third_token",
    "before_last_token",
    "two_before_last_token",
    # the draft's tokens in the known text: how many of its first 8 occur there, how often its
    # first does and how far back it last did (development set 2.4530 / 1.0111 -> 2.4604 / 1.0159
    # every position / decode step, gsm8k-human 1.8735 / 1.2122 -> 1.8975 / 1.2321; in lab refits,
    # the first token's count and distance alone 2.4571 / 1.0144 and 1.8879 / 1.2270, the 8
    # tokens' count alone 2.4546 / 1.0099, a lower decode step). Appended, as above.
    "seen_tokens8",
    "first_token_count",
    "first_token_distance",
)
# first_token_distance of a draft whose first token the known text does not use (or that is empty)
UNSEEN_DISTANCE = 1 << 20
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
TWEEDIE_POWER = 1.5  # the loss's variance power (model_params)
SCORE_ROWS = 1 << 16  # drafts scored at a time
# The model of the first choice is fitted on every second calibration position (the seed's
# sample); the chain model on every position, since its labels read the choice at the next one
# (config.CHAIN_MODEL_CALIBRATION). Fitting the first on every position too chose no better
# (development set 2.4774 / 1.0303 against 2.4777 / 1.0306) and took twice as long (2.4 s).
FIRST_CHOICE_STRIDE = 2


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
    LightGBM reads it (the same values, exactly), filled column by column without an int copy."""
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

    # every family but ngram-rank2, which runs before 2026-12-06 proposed as agreement evidence and
    # to branch the token trees: without it, on the development set every position / decode step
    # rose from 2.4419 / 0.9927 to 2.4435 / 0.9935 and the run took 18.7-19.0 s against 21.0-21.8 s
    # (three runs each, alternated); the trees lost some (tree_b16 / b64 2.681 / 3.011 -> 2.668 /
    # 2.941). A bundle of such a run still drafts it (live/bundle.py: ngram_rank2.arrow).
    families: ClassVar[tuple[str, ...]] = tuple(name for name in families.NAMES if name != "ngram-rank2")
    reads_features: ClassVar[bool] = True
    ngram_by_support: ClassVar[bool] = True
    text_from_tokens: ClassVar[bool] = True
    slow_imports: ClassVar[tuple[str, ...]] = ("lightgbm",)
    # Where the pick is one of these families' drafts, the drafter keeps its first token and chooses
    # again after it: the rest of the draft is the choice at the next position, as if that token had
    # been written (live: Session.propose; here: evaluate.chained_acceptance). Drafts taken from
    # train statistics are least sure after their first token, where the trace's own text, the
    # token included, may take over (most often a recent copy). Development set (every position /
    # decode step): 2.4604 / 1.0159 -> 2.4778 / 1.0306; gsm8k-human 1.8975 / 1.2321 -> 1.9930 /
    # 1.3132. In a lab over a run's choices (the next choice's tokens alone, not the pick's after
    # a shorter one): after these families 2.4777 / 1.0304 and 1.9909 / 1.3109; after every pick
    # 2.4824 / 1.0317 and 1.9382 / 1.2924; after recent copies too 2.4852 / 1.0324 and 2.0110 /
    # 1.3140, but then most proposes choose twice (71% and 84% of positions, against 38% and 52%),
    # which doubles propose's median time.
    chain: ClassVar[tuple[str, ...]] = ("ngram-all", "backoff")

    model: object  # the trained lightgbm.Booster, or None when there was nothing to learn
    calibration_drafts: int
    calibration_positions: int
    excluded: tuple[str, ...] = ()
    trees: TreeEnsemble | None = None  # the model as the bundle stores it (trees.py), checked equal
    curves: AcceptanceCurves | None = None  # how far drafts scored alike were accepted (token trees)
    # The chain model: what a chain family's draft accepts as the drafter proposes it, its first
    # token and then the choice after it (a lightgbm.Booster, its TreeEnsemble, its drafts). It
    # scores those families' drafts in the first choice at a position; the choice after their first
    # token, and everything the trees and multi-draft proposals rank, is the model's above.
    chain_model: object = None
    chain_trees: TreeEnsemble | None = None
    chain_drafts: int = 0

    @classmethod
    def fit(cls, features: pa.Table, draft_len: int, exclude_families: tuple[str, ...] = (),
            chain_model: bool = False) -> ConfidencePolicy:
        """Fit on the calibration drafts of the IN_TREES families (less any excluded ones) at every
        FIRST_CHOICE_STRIDE-th position, and read the acceptance curves the token trees use off the
        same drafts' predictions; with chain_model (--chain-model, whose calibration has every
        position), then the chain model on the chain families' drafts at every position
        (chain_labels)."""

        # one row per draft at a position (a draft proposed by several sources is one proposal) of
        # the families scored: the rows found from the few columns that say which, and then the
        # columns read here taken once (filtering the wide table twice took 0.35 s each on the
        # development set)
        scored_at = np.flatnonzero(scored_mask(features, exclude_families))
        ids = _position_ids(features.column("trace_id").to_numpy()[scored_at],
                            features.column("pos").to_numpy()[scored_at])
        scorers = scoring_rows(ids, features.column("draft_key").to_numpy()[scored_at],
                               selectable_rows(features, exclude_families)[scored_at])
        own = scorers == np.arange(len(scored_at))
        keep = features.select([*feature_columns(), *LABELS, "trace_id", "pos", "draft_tokens"]).take(
            pa.array(scored_at[own]))  # (completion_pos is a feature)
        del features  # (calibrate's only reference: the rest of its columns go)
        accepted = keep.column("accepted").to_numpy().astype(np.float64)
        # the first model's drafts: with the chain model's calibration (every position), every
        # FIRST_CHOICE_STRIDE-th position's; else every calibration position's
        first = np.ones(keep.num_rows, dtype=bool)
        if chain_model:
            first = keep.column("completion_pos").to_numpy() % FIRST_CHOICE_STRIDE == 0
        n_first = int(np.count_nonzero(first))
        positions = len(run_starts(ids[own][first]))  # (every position keeps a row: its first draft's scorer)
        if n_first < 2 or accepted[first].sum() == 0:
            # nothing to learn from (and a Tweedie fit needs some acceptance): every draft scores
            # the same, so ties keep the candidate order
            return cls(None, n_first, 0, tuple(exclude_families))
        matrix = feature_matrix(keep, np.float64)  # as LightGBM reads it
        if not chain_model:
            del keep  # (the chain labels read it)
        release_unused_memory()  # the Arrow tables' pages, before LightGBM's bins are made
        # without the chain model's positions, every row: no copy of the matrix in train()
        fitted = matrix if n_first == len(matrix) else matrix[first]
        model = _train(fitted, accepted[first], keep_training=True)
        # its predictions: of the drafts it was fitted on as its training kept them, and of the
        # other positions' choices (the picks chain_labels reads; the rest are never read)
        predicted = np.zeros(len(matrix))
        predicted[first] = training_predictions(model, n_first)
        curves = AcceptanceCurves.fit(predicted[first], accepted[first], draft_len)
        model.free_dataset()
        trees = exported_trees(model, fitted)
        del fitted
        chained_model, chain_trees, chained = None, None, np.zeros(0, dtype=bool)
        if chain_model:
            later = ~first & selectable_rows(keep, exclude_families)
            predicted[later] = raw_predict(model, matrix[later])
            chained, labels = chain_labels(keep, predicted, cls.chain, draft_len, exclude_families)
            if np.count_nonzero(chained) >= 2 and labels[chained].sum() > 0:
                chain_matrix = matrix[chained]
                chained_model = _train(chain_matrix, labels[chained])
                chain_trees = exported_trees(chained_model, chain_matrix)
        return cls(model, n_first, positions, tuple(exclude_families), trees, curves,
                   chained_model, chain_trees, int(np.count_nonzero(chained)) if chain_trees is not None else 0)

    @classmethod
    def calibrate(cls, wh: Warehouse, cfg: RunConfig) -> ConfidencePolicy:
        return cls.fit(calibration_features(wh), cfg.draft_len, chain_model=cfg.chain_model)

    def score(self, drafts: pa.Table, wanted: np.ndarray | None = None) -> np.ndarray:
        """The model's raw (log-scale) prediction of each draft's accepted length: what the pick
        compares, here and live (ranking by exp of it would be the same but for float ties; with a
        chain model, the first pick at a position compares scores()'s first choice's instead).
        wanted: a mask of the drafts to score (default: every draft); their predictions, in order."""
        return self.scores(drafts, wanted, first=False)[0]

    def scores(self, drafts: pa.Table, wanted: np.ndarray | None = None,
               first: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """score()'s predictions, and (first) the first choice's at a position: there the chain
        model scores the chain families' drafts (as proposed: their first token, then the choice
        after it), the model the rest. The model's alone are what the choice after a chained
        token, the token trees and the multi-draft proposals compare. One feature matrix a slice
        serves both. The first choice's are None without a chain model (they are the model's)."""
        count = drafts.num_rows if wanted is None else int(np.count_nonzero(wanted))
        if count == 0 or self.model is None:
            return np.zeros(count), None
        chained = None
        if first and self.chain_model is not None:
            chained = _in_families(drafts, [name for name in self.chain if name not in self.excluded])
        # a slice at a time: the feature matrix and LightGBM's copies of it stay small (each row's
        # prediction is its own, so slicing changes no value); the slices are the table's own
        # (taking the wanted rows out of it first copied every feature column: 0.4 s on the
        # development set's eval drafts)
        predicted, firsts = [], []
        for start in range(0, drafts.num_rows, SCORE_ROWS):
            rows = slice(start, start + SCORE_ROWS)
            matrix = feature_matrix(drafts.slice(start, SCORE_ROWS), np.float64)
            if wanted is not None:
                matrix = matrix[wanted[rows]]
            if not len(matrix):
                continue
            predicted.append(raw_predict(self.model, matrix))
            if chained is not None:
                by_chain = chained[rows] if wanted is None else chained[rows][wanted[rows]]
                part = predicted[-1].copy()
                if by_chain.any():
                    part[by_chain] = raw_predict(self.chain_model, matrix[by_chain])
                firsts.append(part)
        return np.concatenate(predicted), (np.concatenate(firsts) if chained is not None else None)

    def model_tables(self) -> dict[str, pa.Table]:
        """The trees as node tables (trees.NODE_COLUMNS), recorded with the run for export: the
        model's in policy_trees, the chain model's in policy_chain_trees."""
        recorded = {"policy_trees": self.trees, "policy_chain_trees": self.chain_trees}
        return {table: trees.nodes for table, trees in recorded.items() if trees is not None}

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
            if not results["per_source"].get(family, {}).get("proposed"):
                continue
            without = ConfidencePolicy.fit(features, cfg.draft_len, exclude_families=(family,),
                                           chain_model=cfg.chain_model)
            avg = summarize(without.evaluate(wh, cfg, None, None).selected, cfg.draft_len)["avg_accepted"]
            table[family] = {"selected_without": avg, "marginal": full - avg}
        return table

    def to_dict(self) -> dict:
        return {
            "kind": "gradient-boosted trees (Tweedie loss) on per-draft features",
            "library": "lightgbm",  # (runs before it: scikit-learn, without this key)
            # the families whose drafts it proposed (runs without this key: every family)
            "families": list(self.families),
            "choices": [f for f in SELECTABLE if f not in self.excluded],
            # the families it scores: the choices, and the drafts that only branch token trees
            "scored": [f for f in IN_TREES if f in self.families and f not in self.excluded],
            # fitted on, and scoring, one row per distinct draft at a position (scoring_rows)
            "scoring": "per-draft",
            # the families after whose pick the drafter chooses again past the first token (runs
            # before 2026-12-07, without this key: none)
            "chain": list(self.chain) if self.model is not None else [],
            # the first choice scores the chain families' drafts by the chain model (runs before
            # 2026-12-07's chain model, without this key: by the model above), fitted on this many
            # drafts; its trees are the run's policy_chain_trees rows
            "chain_model": self.chain_trees is not None,
            "chain_drafts": self.chain_drafts,
            "trees": TREES,
            "leaves": LEAVES,
            # how its n-gram drafts were chosen (ngram_choices.sql), which export chooses again
            "ngram_choice": "support" if self.ngram_by_support else "count",
            # where prompt autocomplete read its text (runs before 2026-12-07, without this key: the
            # dataset's prompt text, and the line chunk by chunk), which the live drafter reads alike
            "autocomplete_text": "tokens" if self.text_from_tokens else "dataset",
            "features": list(feature_columns()),
            "calibration_drafts": self.calibration_drafts,
            "calibration_positions": self.calibration_positions,
            # the raw prediction's constant term; the trees are the run's policy_trees rows
            "baseline": None if self.trees is None else self.trees.baseline,
            "chain_baseline": None if self.chain_trees is None else self.chain_trees.baseline,
            # the token trees' chance per draft and depth (draft_trees.py), by raw prediction bin
            "acceptance_curves": None if self.curves is None else self.curves.to_dict(),
        }


def position_ids(drafts: pa.Table) -> np.ndarray:
    """Each draft row's position as a number, rows in (trace_id, pos) order."""
    return _position_ids(drafts.column("trace_id").to_numpy(), drafts.column("pos").to_numpy())


def _position_ids(trace_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
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
    order = lexsort((rows, ~choosable, draft_keys, positions))
    at, key = positions[order], draft_keys[order]
    starts = np.flatnonzero(np.r_[True, (at[1:] != at[:-1]) | (key[1:] != key[:-1])])
    scorers = np.empty(len(rows), dtype=np.int64)
    scorers[order] = np.repeat(order[starts], np.diff(np.r_[starts, len(rows)]))
    return scorers


def chain_labels(drafts: pa.Table, predicted: np.ndarray, chain: tuple[str, ...], draft_len: int,
                 exclude_families: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The drafts the chain model is fitted on (a mask) and their labels: what each accepts as the
    drafter proposes it (drafts: one row per distinct draft at a calibration position, in
    position order; predicted: the first model's raw prediction of each).

    A chain family's whole draft (draft_len tokens) whose first token is the trace's is proposed as
    that token and then the choice at the next position, the first model's pick there: its label
    is 1 + what that pick accepted (at most draft_len - 1); where nothing could be chosen there,
    the draft is proposed as it stands, and its label is what it accepted. The pick's own tokens
    that follow a shorter choice accepted whole (a calculation's result, say) are left out of the
    label, which is then lower than the draft's acceptance. Its other drafts are proposed as they
    are: their label is what they accepted. A whole draft whose next position was not calibrated (past the
    last calibration position of its trace) is left out: what it would accept is not known.

    >>> drafts = pa.table({"trace_id": [1, 1, 1, 1], "pos": [5, 5, 6, 6], "completion_pos": [0, 0, 1, 1],
    ...                    "family": ["ngram-all", "recent-copy", "ngram-all", "recent-copy"],
    ...                    "accepted": [2, 1, 0, 2], "draft_tokens": [4, 4, 4, 4]})
    >>> fitted, labels = chain_labels(drafts, np.array([0.5, 0.1, 0.2, 0.9]), ("ngram-all",), 4)
    >>> fitted.tolist(), labels.tolist()  # the pick at position 6 accepted 2: 1 + 2 at position 5
    ([True, False, True, False], [3.0, 1.0, 0.0, 2.0])
    >>> nothing_next = drafts.set_column(3, "family", pa.array(["ngram-all", "recent-copy", "recent-copy-2",
    ...                                                         "recent-copy-2"]))
    >>> chain_labels(nothing_next, np.zeros(4), ("ngram-all",), 4)[1].tolist()  # proposed as it stands
    [2.0, 1.0, 0.0, 2.0]
    """
    positions = position_ids(drafts)
    accepted = drafts.column("accepted").to_numpy().astype(np.float64)
    choice = np.flatnonzero(selectable_rows(drafts, exclude_families))
    picks = choice[best_in_runs(predicted[choice], run_starts(positions[choice]))]
    n_positions = int(positions[-1]) + 1 if len(positions) else 0
    pick_accepted = np.full(n_positions, np.nan)  # where nothing could be chosen, the draft stays its own
    pick_accepted[positions[picks]] = accepted[picks]
    firsts = run_starts(positions)
    trace = drafts.column("trace_id").to_numpy()[firsts]
    completion_pos = drafts.column("completion_pos").to_numpy()[firsts]
    has_next = np.r_[(trace[1:] == trace[:-1]) & (completion_pos[1:] == completion_pos[:-1] + 1), False][positions]
    next_accepted = np.r_[pick_accepted[1:], np.nan][positions]
    in_chain = _in_families(drafts, [name for name in chain if name not in exclude_families])
    whole = in_chain & (drafts.column("draft_tokens").to_numpy() == draft_len) & (accepted >= 1)
    labels = accepted.copy()
    after = whole & ~np.isnan(next_accepted)
    labels[after] = 1 + np.minimum(next_accepted[after], draft_len - 1)
    return in_chain & (has_next | ~whole), labels


def _train(matrix: np.ndarray, labels: np.ndarray, keep_training: bool = False):
    """A booster fitted on the rows (model_params); keep_training: its training predictions are
    read after (training_predictions), and free_dataset lets its data go."""
    import lightgbm

    params = model_params(len(matrix))
    dataset = lightgbm.Dataset(matrix, labels, params=params, categorical_feature=[0])
    return lightgbm.train(params, dataset, num_boost_round=TREES, keep_training_booster=keep_training)


def model_params(rows: int) -> dict:
    """LightGBM's settings for a fit on `rows` drafts. Its bin edges come from all of them
    (bin_construct_sample_cnt), so the fit has no random part: nothing samples rows or features.

    The loss is Tweedie's with variance power TWEEDIE_POWER (a log link, as Poisson's: the raw
    score is the log of the expected accepted length). Accepted lengths are mostly 0, with a long
    tail up to draft_len, more spread than a Poisson count's (variance = mean); a power between 1
    (Poisson) and 2 (gamma) lets the variance grow faster with the mean. Chosen on the calibration
    split alone: fitted on half of its problems and choosing on the other half, both ways (lab
    script, the picks' own accepted tokens per calibration position), Poisson against powers 1.2
    / 1.3 / 1.4 / 1.5 / 1.6 / 1.8:
      - development set: 2.6842 against 2.6880 / 2.6871 / 2.6859 / 2.6899 / 2.6873 / 2.6775;
      - gsm8k-human: 1.9252 against 1.9355 / 1.9271 / 1.9349 / 1.9307 / 1.9297 / 1.9132.
    1.5 is the development set's best. Its runs, every position / decode step, against Poisson's:
    development set 2.4815 / 1.0348 against 2.4778 / 1.0306, gsm8k-human 2.0190 / 1.3374 against
    1.9930 / 1.3132.

    With Poisson's loss before it, poisson_max_delta_step 0.35 capped each tree's step on the log
    scale, and a little L2 on the leaves (kept): measured in a lab refit on the development set
    against scikit-learn's HistGradientBoostingRegressor, the model before, with the same trees
    and leaves (every position / decode step 2.4363 / 0.9911), before the last four token-id
    features:
      - max_delta_step 0.7 (default): 2.4305 / 0.9868;  1.5: 2.4182;  3: 2.3943;
      - 0.3 / 0.35, bins from every row: 2.4351 / 2.4331 (0.25 / 0.5 from a 200,000-row sample:
        2.4362 / 2.4326);
      - 0.35 with lambda_l2 1 (kept): 2.4372 / 0.9923; gsm8k-human 1.8533 / 1.1966 (sklearn 1.8576 / 1.1998).
    The fit took 1.5 s against scikit-learn's 3.3 s."""
    return {
        "objective": "tweedie",
        "tweedie_variance_power": TWEEDIE_POWER,
        "learning_rate": 0.1,
        "num_leaves": LEAVES,
        "min_data_in_leaf": 20,
        "lambda_l2": 1.0,
        "max_bin": 255,
        "bin_construct_sample_cnt": max(rows, 1),
        "deterministic": True,
        "force_row_wise": True,  # LightGBM would otherwise time both layouts first
        "verbose": -1,
    }


def raw_predict(model, matrix: np.ndarray) -> np.ndarray:
    """The booster's raw prediction (before the log link's exp) of each row, on both cores."""
    return model.predict(np.asarray(matrix, dtype=np.float64), raw_score=True)


def training_predictions(model, rows: int) -> np.ndarray:
    """The raw predictions of the rows a booster was trained on, as its training kept them:
    eval_train (LightGBM's public hook for a custom metric) hands them over as means, exp(raw),
    and their log is the raw prediction to within two machine epsilons, which the
    acceptance curves' quantile bins do not see. Predicting the 282,457 rows again took 0.5 s."""
    kept: list[np.ndarray] = []
    model.eval_train(lambda predicted, _: kept.append(np.log(predicted)) or ("kept", 0.0, True))
    if len(kept) != 1 or kept[0].shape != (rows,):
        raise SpecdraftError("confidence model: LightGBM's eval_train did not hand over the training predictions")
    return kept[0]


def exported_trees(model, matrix: np.ndarray, sample: int = 4096) -> TreeEnsemble:
    """The trained booster as a TreeEnsemble, after checking that it predicts bit for bit what
    LightGBM does on (a sample of) the training rows: the live drafter scores with it."""
    trees = TreeEnsemble.from_lightgbm(model)
    rows = matrix[np.linspace(0, len(matrix) - 1, min(sample, len(matrix))).astype(np.int64)]
    if not np.array_equal(trees.raw_predict(rows), raw_predict(model, rows)):
        raise SpecdraftError("confidence model: the exported trees do not predict what LightGBM predicts "
                             "(has its model dump changed?)")
    return trees


def selectable(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> pa.Table:
    """The rows the policy may choose: SELECTABLE families, less any excluded (leave-one-out)."""
    return features.filter(selectable_rows(features, exclude_families))


def selectable_rows(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> np.ndarray:
    """Which rows selectable() keeps, as a mask."""
    return _in_families(features, [f for f in SELECTABLE if f not in exclude_families])


def scored(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> pa.Table:
    """The rows the model is fitted on and scores: IN_TREES families, less any excluded."""
    return features.filter(scored_mask(features, exclude_families))


def scored_mask(features: pa.Table, exclude_families: tuple[str, ...] = ()) -> np.ndarray:
    """Which rows scored() keeps, as a mask."""
    return _in_families(features, [f for f in IN_TREES if f not in exclude_families])


def _in_families(features: pa.Table, names: list[str]) -> np.ndarray:
    """Which rows' family is one of `names`, as a mask. The names are compared once each, through
    the column's dictionary: over the development set's 780k calibration rows this takes 10 ms,
    and pyarrow's is_in 0.24 s at its first call in a process (6 ms after), which the calibrate
    stage's was."""
    family = features.column("family").combine_chunks()
    if not pa.types.is_dictionary(family.type):
        family = family.dictionary_encode()
    wanted = np.isin(np.array(family.dictionary.to_pylist(), dtype=object), names)
    return np.r_[wanted, False][family.indices.fill_null(len(wanted)).to_numpy()]


def calibration_features(wh: Warehouse) -> pa.Table:
    return wh.query("policy/calibration_features").to_arrow_table()

