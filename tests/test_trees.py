"""The confidence model as a node table (policy/trees.py): its raw predictions are LightGBM's, bit
for bit, on rows it was trained on, on values at and beside every threshold and on rows with
families it never saw; the table survives the bundle's Arrow IPC round trip; a damaged table, or a
split it cannot read, is refused in one line."""

from __future__ import annotations

import lightgbm
import numpy as np
import pyarrow as pa
import pytest

from specdraft.errors import SpecdraftError
from specdraft.policy.confidence import model_params, raw_predict, training_predictions
from specdraft.policy.trees import SCORE_CHUNK, TreeEnsemble


def _data(seed: int, n: int, codes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Rows like the confidence model's: a family code, then integer counts (some large, some
    repeating), and an accepted length that depends on both."""
    rng = np.random.default_rng(seed)
    family = rng.choice(codes, n)
    counts = np.column_stack([rng.integers(0, 64, n), rng.geometric(0.01, n), rng.integers(0, 3, n),
                              rng.integers(0, 10**9, n)])
    accepted = rng.poisson(np.exp(0.3 * (family % 3) + counts[:, 0] / 40 - counts[:, 2] * 0.2))
    return np.column_stack([family, counts]).astype(np.int64), accepted.astype(np.float64)


def _train(matrix: np.ndarray, accepted: np.ndarray, trees: int = 40, **params) -> lightgbm.Booster:
    settings = {**model_params(len(matrix)), **params}
    dataset = lightgbm.Dataset(matrix.astype(np.float64), accepted, params=settings, categorical_feature=[0])
    return lightgbm.train(settings, dataset, num_boost_round=trees, keep_training_booster=True)


@pytest.fixture(scope="module")
def fitted():
    model = _train(*_data(0, 20_000, [0, 2, 4, 5]))
    return model, TreeEnsemble.from_lightgbm(model)


def test_raw_predictions_are_lightgbms_bit_for_bit(fitted):
    model, trees = fitted
    # families it saw and ones it never did (LightGBM sends those right, as codes not in a split's set)
    matrix, _ = _data(1, 30_000, list(range(9)))
    assert trees.n_trees == 40 and (trees.nodes.column("left_codes").to_numpy() != 0).any()
    assert np.array_equal(trees.raw_predict(matrix), raw_predict(model, matrix))
    # a few rows at a time, as the live drafter scores a position's drafts (one row is a case of
    # its own: numpy would sum it pairwise)
    for n in (1, 2, 3, 7, 16, SCORE_CHUNK + 1):  # a whole chunk, then one row alone
        for start in range(0, 400, n):
            rows = matrix[start : start + n]
            assert np.array_equal(trees.raw_predict(rows), raw_predict(model, rows)), (n, start)


def test_values_at_and_beside_every_threshold_go_lightgbms_way(fitted):
    """Each numeric split's threshold, floored, ceiled and one past, and values beyond the trained
    range: the node table's `x <= floor(threshold)` is LightGBM's `x <= threshold` on integers."""
    model, trees = fitted
    matrix, _ = _data(3, 30_000, [0, 2, 4, 5])
    nodes = trees.nodes.to_pydict()
    for j in range(1, matrix.shape[1]):
        cuts = np.array([t for f, t in zip(nodes["feature"], nodes["threshold"]) if f == j])
        assert len(cuts), j
        edges = np.concatenate([np.floor(cuts), np.ceil(cuts), np.floor(cuts) + 1, [-1, 10**11]])
        at = np.resize(edges.astype(np.int64), len(matrix))
        matrix[:, j] = at
        assert np.array_equal(trees.raw_predict(matrix), raw_predict(model, matrix)), j


def test_the_training_predictions_are_raw_predicts_to_the_last_places(fitted):
    """training_predictions (the log of what eval_train hands over) is raw_predict of the training
    rows, in row order, to within two machine epsilons: the acceptance curves' input."""
    model, _ = fitted
    matrix, _ = _data(0, 20_000, [0, 2, 4, 5])
    kept = training_predictions(model, len(matrix))
    assert np.abs(kept - raw_predict(model, matrix)).max() <= 2 * np.finfo(np.float64).eps
    with pytest.raises(SpecdraftError, match="training predictions"):
        training_predictions(model, len(matrix) + 1)


def test_a_split_that_treats_zero_as_missing_is_refused():
    """zero_as_missing sends 0 where missing values go, not by the threshold: the node table has no
    such rule, so such a booster is refused rather than scored differently live."""
    model = _train(*_data(6, 5_000, [0, 2]), trees=3, zero_as_missing=True)
    with pytest.raises(SpecdraftError, match="not one this scorer reads"):
        TreeEnsemble.from_lightgbm(model)


def test_the_node_table_survives_arrow_ipc(fitted, tmp_path):
    _, trees = fitted
    path = tmp_path / "trees.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, trees.nodes.schema) as writer:
        writer.write_table(trees.nodes)
    nodes = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    again = TreeEnsemble(trees.baseline, nodes, trees.n_features)
    matrix, _ = _data(2, 5_000, list(range(9)))
    assert np.array_equal(again.raw_predict(matrix), trees.raw_predict(matrix))


def test_a_damaged_node_table_is_refused(fitted):
    _, trees = fitted
    nodes = trees.nodes.to_pydict()
    looped = dict(nodes, left=[0 if i == 0 else x for i, x in enumerate(nodes["left"])])
    with pytest.raises(SpecdraftError, match="cycle"):
        TreeEnsemble(trees.baseline, pa.table(looped, schema=trees.nodes.schema), trees.n_features)
    shuffled = dict(nodes, tree=[(t + 1) % trees.n_trees for t in nodes["tree"]])
    with pytest.raises(SpecdraftError, match="grouped by tree"):
        TreeEnsemble(trees.baseline, pa.table(shuffled, schema=trees.nodes.schema), trees.n_features)
    with pytest.raises(ValueError, match="feature matrix"):
        trees.raw_predict(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="family codes"):
        trees.raw_predict(np.array([[99, 0, 0, 0, 0]]))
