"""Token trees (policy/draft_trees.py): the vectorised every-position trees equal the live
builder's, tree by tree, on drafts made to share prefixes; a tree is prefix-closed and within its
budget; the acceptance curves fall with depth."""

import numpy as np
import pyarrow as pa
import pytest

from specdraft.policy import draft_trees
from specdraft.policy.draft_trees import AcceptanceCurves, TokenTree, best_tree, tree_accepted, tree_holdings

DRAFT_LEN = 16


def _curves(rng) -> AcceptanceCurves:
    raw = rng.normal(size=4000)
    accepted = np.minimum(rng.poisson(3 * np.exp(raw)), DRAFT_LEN)
    return AcceptanceCurves.fit(raw, accepted, DRAFT_LEN)


def _positions(rng, n_positions: int):
    """Drafts that copy the next tokens for a while and then stray, over a 4-token vocabulary (so
    many share prefixes), with their accepted lengths."""
    drafts, flat, actual = [], [], []
    for position in range(n_positions):
        truth = rng.integers(0, 4, size=DRAFT_LEN).tolist()
        actual.append(truth)
        for _ in range(rng.integers(1, 9)):
            keep = int(rng.integers(0, DRAFT_LEN))
            draft = (truth[:keep] + rng.integers(0, 4, size=DRAFT_LEN).tolist())[: int(rng.integers(1, DRAFT_LEN + 1))]
            drafts.append(draft)
            flat.append(position)
    accepted = [next((i for i, (a, b) in enumerate(zip(d, actual[f])) if a != b), len(d)) for d, f in zip(drafts, flat)]
    return drafts, np.array(flat), np.array(accepted), actual


def test_curves_fall_with_depth_and_match_the_calibration_rates():
    rng = np.random.default_rng(1)
    curves = _curves(rng)
    assert np.all(np.diff(curves.survival, axis=1) <= 0)
    assert curves.survival[-1, 0] > curves.survival[0, 0]  # drafts predicted better are accepted more
    back = AcceptanceCurves.from_dict(curves.to_dict())
    assert np.array_equal(back.survival, curves.survival) and np.array_equal(back.edges, curves.edges)


# token ids as Qwen's (18 bits, three to a sort key) and wide enough for one to a key
@pytest.mark.parametrize("id_offset", [0, 151_000, 1 << 40])
@pytest.mark.parametrize("chunk_rows", [7, 1 << 16])
def test_vectorised_trees_equal_the_live_builder(monkeypatch, chunk_rows, id_offset):
    rng = np.random.default_rng(2)
    curves = _curves(rng)
    drafts, flat, accepted, actual = _positions(rng, 300)
    drafts = [[token + id_offset for token in draft] for draft in drafts]
    actual = [[token + id_offset for token in truth] for truth in actual]
    raw = rng.normal(size=len(drafts))
    monkeypatch.setattr(draft_trees, "CHUNK_ROWS", chunk_rows)  # chunks never split a position
    held = tree_holdings(curves, raw, flat, pa.array(drafts, pa.list_(pa.int64())), (1, 5, 16, 64))
    got = {budget: tree_accepted(accepted, flat, values, 301) for budget, values in held.items()}
    for budget, values in got.items():
        want, want_held = [], []
        for position in range(300):
            rows = np.flatnonzero(flat == position)
            tree = best_tree(curves, [drafts[i] for i in rows], raw[rows].tolist(), budget)
            assert len(tree.token_ids) <= budget
            assert all(-1 <= parent < i for i, parent in enumerate(tree.parents))
            assert all(tree.probs[i] <= tree.probs[parent] for i, parent in enumerate(tree.parents) if parent >= 0)
            want.append(tree.accepted(actual[position]))
            paths = _paths(tree)
            want_held += [sum(tuple(drafts[i][:j]) in paths for j in range(1, len(drafts[i]) + 1)) for i in rows]
        assert values[:300].tolist() == want, budget
        assert values[300] == 0  # a position with no drafts
        assert held[budget].tolist() == want_held, budget  # the same nodes, not only the same length
    assert np.all(got[64] >= got[16]) and np.all(got[16] >= got[5]) and got[64].mean() > got[1].mean()


def _paths(tree: TokenTree) -> set[tuple[int, ...]]:
    """Every node's path from the root."""
    paths: list[tuple[int, ...]] = []
    for token, parent in zip(tree.token_ids, tree.parents):
        paths.append((*(paths[parent] if parent >= 0 else ()), token))
    return set(paths)


def test_a_tree_holds_the_likeliest_nodes():
    curves = AcceptanceCurves(np.array([0.0]), np.array([[0.5, 0.2, 0.1], [0.9, 0.8, 0.3]]))
    # draft 0 (bin 0) and draft 1 (bin 1) share their first token
    tree = best_tree(curves, [[7, 1, 2], [7, 3, 4]], [-1.0, 1.0], budget=3)
    assert tree == TokenTree([7, 3, 4], [-1, 0, 1], [0.9, 0.8, 0.3])
    assert best_tree(curves, [[7, 1, 2], [7, 3, 4]], [-1.0, 1.0], budget=4).token_ids == [7, 3, 4, 1]
    assert tree.accepted([7, 3, 9]) == 2 and tree.accepted([8]) == 0
    assert best_tree(curves, [], [], 16) == TokenTree([], [], [])
