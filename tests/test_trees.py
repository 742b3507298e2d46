"""The confidence model as a node table (policy/trees.py): its raw predictions are sklearn's, bit for
bit, on rows it was fitted on and on rows with families it never saw; the table survives the
bundle's Arrow IPC round trip; a damaged table is refused in one line."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from specdraft.errors import SpecdraftError
from specdraft.policy.confidence import (
    LEAVES,
    fitted_predictions,
    model_rows,
    raw_predict,
    training_predictions,
)
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


@pytest.fixture(scope="module")
def fitted():
    matrix, accepted = _data(0, 20_000, [0, 2, 4, 5])
    model = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=LEAVES, loss="poisson",
                                          categorical_features=[0], early_stopping=False, random_state=0)
    model.fit(matrix.astype(np.float64), accepted)
    return model, TreeEnsemble.from_sklearn(model)


def test_the_fits_own_predictions_of_its_rows_are_raw_predicts():
    """fitted_predictions keeps the predictions the fit made of its training rows (not predicted
    again), and they are raw_predict's bit for bit on every row; a fit outside the block keeps
    nothing and sklearn's function is back; without kept predictions, raw_predict's are given."""
    from sklearn.ensemble._hist_gradient_boosting import gradient_boosting

    update = gradient_boosting._update_raw_predictions
    matrix, accepted = _data(5, 20_000, [0, 2, 4, 5])
    matrix = matrix.astype(np.float64)
    model = HistGradientBoostingRegressor(max_iter=30, max_leaf_nodes=LEAVES, loss="poisson",
                                          categorical_features=[0], early_stopping=False, random_state=0)
    with fitted_predictions() as kept:
        model.fit(matrix, accepted)
    assert len(kept) == 1 and gradient_boosting._update_raw_predictions is update
    again = raw_predict(model, matrix)
    assert np.array_equal(kept[0], again)
    assert training_predictions(model, matrix, kept) is kept[0]  # taken, not predicted again
    assert np.array_equal(training_predictions(model, matrix, kept), again)
    assert np.array_equal(training_predictions(model, matrix, []), again)
    # predictions of other rows (a damaged array) are not taken
    assert np.array_equal(training_predictions(model, matrix, [kept[0] + 1.0]), again)


def test_raw_predictions_are_sklearns_bit_for_bit(fitted):
    model, trees = fitted
    # families it saw and ones it never did (sklearn sends those where missing values go)
    matrix, _ = _data(1, 30_000, list(range(9)))
    assert trees.n_trees == 40 and (trees.nodes.column("left_codes").to_numpy() != 0).any()
    assert np.array_equal(trees.raw_predict(matrix), raw_predict(model, matrix))
    # a few rows at a time, as the live drafter scores a position's drafts (one row is a case of
    # its own: numpy would sum it pairwise)
    for n in (1, 2, 3, 7, 16, SCORE_CHUNK + 1):  # a whole chunk, then one row alone
        for start in range(0, 400, n):
            rows = matrix[start : start + n]
            assert np.array_equal(trees.raw_predict(rows), raw_predict(model, rows)), (n, start)


def test_raw_predict_is_sklearns_own_walk(fitted):
    """raw_predict walks binned rows: the same floats as sklearn's _raw_predict over the float rows,
    on rows of the families the fit saw, on values at and beside every bin threshold and beyond the
    fitted range, and on rows with families it never saw (missing values to both)."""
    model, _ = fitted
    matrix, _ = _data(3, 30_000, [0, 2, 4, 5])
    thresholds = model._bin_mapper.bin_thresholds_
    for j in range(1, matrix.shape[1]):
        edges = np.concatenate([thresholds[j], np.floor(thresholds[j]), np.ceil(thresholds[j]), [-1, 10**12]])
        at = np.resize(edges.astype(np.int64), len(matrix))
        matrix[: len(at), j] = at
    assert np.array_equal(raw_predict(model, matrix), model._raw_predict(matrix.astype(np.float64))[:, 0])
    unseen, _ = _data(4, 5_000, list(range(9)))
    assert np.array_equal(raw_predict(model, unseen), model._raw_predict(unseen.astype(np.float64))[:, 0])


def test_model_rows_are_sklearns_preprocessed_rows(fitted):
    """model_rows (raw_predict's input, made without sklearn's ColumnTransformer) equals
    _preprocess_X: the family codes as category indices, the ones the fit never saw NaN."""
    model, _ = fitted
    matrix, _ = _data(5, 5_000, list(range(9)))
    expected = model._preprocess_X(matrix.astype(np.float64), reset=False)
    assert np.isnan(expected[:, 0]).any() and (expected[:, 0] == 3).any()  # unseen codes, and code 5 -> index 3
    assert np.array_equal(model_rows(model, matrix), expected, equal_nan=True)
    assert model_rows(model, matrix[:0]).shape == (0, matrix.shape[1])


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
