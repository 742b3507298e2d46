"""Draft length as a decision (policy/draft_length.py), on walks small enough to follow by hand."""

import numpy as np

from specdraft.policy.draft_length import adaptive_lengths, length_study, walk
from specdraft.policy.draft_trees import AcceptanceCurves


def test_the_walk_moves_accepted_plus_one_and_cuts_at_the_drafted_length():
    accepted = np.array([2, 0, 0, 1, 0])  # one trace of 5 response positions
    offsets = np.array([0, 5])
    assert [x.tolist() for x in walk(accepted, np.full(5, 16), offsets)] == [[16, 16], [2, 1]]
    assert [x.tolist() for x in walk(accepted, np.full(5, 1), offsets)] == [[1, 1, 1], [1, 0, 1]]
    assert [x.tolist() for x in walk(accepted, np.zeros(5, dtype=np.int64), offsets)] == [[0] * 5, [0] * 5]


def test_adaptive_lengths_draft_what_pays():
    # bin 0: nothing is ever accepted; bin 1: the first two tokens always are, then never
    curves = AcceptanceCurves(np.array([0.0]), np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]))
    raw, lengths = np.array([-1.0, 1.0, 1.0]), np.array([4, 4, 1])
    assert adaptive_lengths(curves, raw, lengths, 0.05).tolist() == [0, 2, 1]
    # at no cost a drafted token costs nothing: the whole draft, even where the curves expect no
    # token accepted past a depth (they are estimates: the shortest of the equal gains cut the
    # parity fixture's drafts from 5,111 tokens accepted to 3,766, in a helper's review)
    assert adaptive_lengths(curves, raw, lengths, 0.0).tolist() == [4, 4, 1]


def test_adaptive_lengths_are_the_best_length_of_each_draft_by_brute_force():
    """The table of best lengths per bin (best_lengths) picks, for every draft, the length a search
    over 0 .. its length picks: the best (1 + expected accepted) / (1 + c * drafted), the longest
    of equal ones."""
    rng = np.random.default_rng(7)
    survival = -np.sort(-rng.random((9, 16)), axis=1) * (rng.random((9, 1)) < 0.8)  # falling; some rows 0
    survival[:, 10:] *= rng.random((9, 1)) < 0.5  # flat tails, where lengths tie at c = 0
    curves = AcceptanceCurves(np.sort(rng.normal(size=8)), survival)
    raw, lengths = rng.normal(size=500), rng.integers(0, 17, size=500)
    for cost in (0.0, 0.01, 0.02, 0.05, 0.1, 0.7):
        expected = []
        for value, most in zip(raw, lengths):
            row = survival[np.searchsorted(curves.edges, value, side="right")]
            gains = [(1.0 + np.cumsum(row)[d - 1] if d else 1.0) / (1.0 + cost * d) for d in range(most + 1)]
            expected.append(max(range(most + 1), key=lambda d: (gains[d], d)))
        assert adaptive_lengths(curves, raw, lengths, cost).tolist() == expected, cost


def test_length_study_reports_every_fixed_length_and_the_adaptive_one():
    curves = AcceptanceCurves(np.zeros(0), np.array([[0.9, 0.5, 0.1, 0.0]]))
    accepted = np.array([2, 0, 0, 1, 0])
    study = length_study(curves, accepted, np.zeros(5), np.full(5, 4), np.array([0, 5]), 0.1, costs=(0.0,))
    assert sorted(study["fixed"]) == ["fixed_1", "fixed_2", "fixed_3", "fixed_4"]
    full = study["fixed"]["fixed_4"]
    assert (full["steps"], full["drafted_per_step"], full["accepted_per_step"]) == (2, 4.0, 1.5)
    assert full["speedup"]["0.1"] == (3 / 1.4 + 2 / 1.4) / 2
    # at c = 0.1 the gain of d tokens is (1 + 0.9 + 0.5 + ...) / (1 + 0.1 d): 2 tokens are best
    assert study["adaptive"]["0.1"]["drafted_per_step"] == 2.0
    assert study["adaptive"]["0.1"]["speedup_at_its_cost"] == study["fixed"]["fixed_2"]["speedup"]["0.1"]
    # the run's --verify-cost joins the reported costs, and `chosen` compares the three there
    assert study["verify_costs"] == [0.0, 0.1]
    assert study["chosen"] == {"verify_cost": 0.1, "adaptive": study["adaptive"]["0.1"]["speedup"]["0.1"],
                               "adaptive_drafted_per_step": 2.0, "fixed_4": full["speedup"]["0.1"],
                               "best_fixed": "fixed_2", "best_fixed_speedup": study["fixed"]["fixed_2"]["speedup"]["0.1"]}
