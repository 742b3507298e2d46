"""Draft length as a decision: what each way of choosing how many tokens to propose costs and saves.

A verify step with d drafted tokens costs 1 + c * d (c: the verify cost of one drafted token,
relative to a decode step) and yields 1 + a tokens, a of them accepted: the expected speedup over
plain decoding is (1 + a) / (1 + c * d), averaged over the steps of a decode walk. The walk here
moves a + 1 tokens a step (the verifier's own next token follows the accepted ones), so drafting
nothing is plain decoding at speedup 1.

Policies, all drafting the policy's chosen draft cut to its length:
- fixed_<n>: n tokens (fewer where the draft is shorter; fixed_16 is the every-position draft);
- adaptive: at each step the length that maximises (1 + E[accepted]) / (1 + c * d), with
  E[accepted | d] = sum over j <= d of the chance of j accepted tokens (the acceptance curves of
  draft_trees.py, read at the draft's raw prediction); 0 where no length pays, the longest of
  equally good lengths (at c = 0, the whole draft). It depends on c.
"""

from __future__ import annotations

import numpy as np

from specdraft.policy.draft_trees import AcceptanceCurves
from specdraft.policy.walks import walk_positions

VERIFY_COSTS = (0.0, 0.01, 0.02, 0.05, 0.1)


def adaptive_lengths(curves: AcceptanceCurves, raw: np.ndarray, lengths: np.ndarray, cost: float) -> np.ndarray:
    """Per position, the draft length (0 .. its draft's length) of the best expected speedup."""
    table = best_lengths(curves, cost)
    return table[curves.bins(raw), np.minimum(lengths, table.shape[1] - 1)]


def best_lengths(curves: AcceptanceCurves, cost: float) -> np.ndarray:
    """(bins, draft_len + 1): the best length to draft for a draft of each length (column) whose raw
    prediction lies in each bin of the curves; what adaptive_lengths reads, and the live drafter
    once per cost (a lookup a propose, not this arithmetic)."""
    expected = np.cumsum(curves.survival, axis=1)  # E[accepted] for d = 1 .. draft_len
    bins, width = expected.shape
    drafted = np.arange(width + 1)
    gain = np.concatenate([np.ones((bins, 1)), 1.0 + expected], axis=1) / (1.0 + cost * drafted)[None, :]
    table = np.empty((bins, width + 1), dtype=np.int64)
    for most in drafted:
        # the longest of equal gains: at c = 0 a drafted token costs nothing, so the whole draft
        # (the curves are flat past the depths calibration saw accepted, and the shortest of equal
        # gains cut drafts that would have been accepted further); at c > 0 a longer draft of the
        # same expected acceptance gains less, so only c = 0 ties
        table[:, most] = most - np.argmax(gain[:, most::-1], axis=1)
    return table


def walk(accepted: np.ndarray, drafted: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decode walk of each trace, a + 1 tokens a step: (drafted, accepted) per step.

    >>> walk(np.array([3, 0, 0, 1, 5]), np.array([2, 2, 2, 2, 2]), np.array([0, 5]))
    (array([2, 2]), array([2, 1]))
    """
    accepted = np.minimum(accepted, drafted)
    steps = walk_positions(accepted + 1, offsets)
    return drafted[steps].astype(np.int64), accepted[steps].astype(np.int64)


def walk_summary(drafted: np.ndarray, accepted: np.ndarray, costs: tuple[float, ...]) -> dict:
    """A decode walk's (drafted, accepted) per step as a draft_length row: steps, tokens drafted and
    accepted per step, and the expected speedup at each cost (replay sets a live walk's beside)."""
    steps = len(drafted)
    return {
        "steps": steps,
        "drafted_per_step": float(drafted.mean()) if steps else 0.0,
        "accepted_per_step": float(accepted.mean()) if steps else 0.0,
        "speedup": {str(c): float(((1 + accepted) / (1 + c * drafted)).mean()) if steps else 1.0 for c in costs},
    }


def length_study(curves: AcceptanceCurves, accepted: np.ndarray, raw: np.ndarray, lengths: np.ndarray,
                 offsets: np.ndarray, verify_cost: float, costs: tuple[float, ...] = VERIFY_COSTS) -> dict:
    """results.json's draft_length: per policy, drafted and accepted tokens per step and the
    expected speedup at each verify cost (VERIFY_COSTS and the run's --verify-cost), and `chosen`:
    the three compared at the run's. Arrays are per eval position (flat): the chosen draft's
    accepted length, raw prediction and length (0: no draft)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    costs = tuple(sorted({*costs, float(verify_cost)}))
    table = {}
    for n in range(1, curves.survival.shape[1] + 1):
        table[f"fixed_{n}"] = walk_summary(*walk(accepted, np.minimum(lengths, n), offsets), costs)
    adaptive = {}
    for c in costs:
        summary = walk_summary(*walk(accepted, adaptive_lengths(curves, raw, lengths, c), offsets), costs)
        adaptive[str(c)] = {**summary, "speedup_at_its_cost": summary["speedup"][str(c)]}
    at = str(float(verify_cost))
    best = max(table, key=lambda name: table[name]["speedup"][at])  # the first (shortest) best
    chosen = {
        "verify_cost": float(verify_cost),
        "adaptive": adaptive[at]["speedup"][at],
        "adaptive_drafted_per_step": adaptive[at]["drafted_per_step"],
        f"fixed_{len(table)}": table[f"fixed_{len(table)}"]["speedup"][at],
        "best_fixed": best,
        "best_fixed_speedup": table[best]["speedup"][at],
    }
    return {"verify_costs": list(costs), "fixed": table, "adaptive": adaptive, "chosen": chosen}
