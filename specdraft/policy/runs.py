"""Rows grouped in runs of equal keys (drafts grouped by eval position): where each run starts,
and each row's rank within its run."""

from __future__ import annotations

import numpy as np


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Indices where a run of equal keys begins (keys grouped, e.g. sorted).

    >>> run_starts(np.array([3, 3, 5, 7, 7])).tolist()
    [0, 2, 3]
    """
    return np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, dtype=np.int64)


def rank_in_runs(starts: np.ndarray, n: int) -> np.ndarray:
    """Each of n rows' place in its run (0 first), given the runs' starts.

    >>> rank_in_runs(np.array([0, 2, 3]), 5).tolist()
    [0, 1, 0, 0, 1]
    """
    return np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))


def best_in_runs(scores: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Row index of the first highest score in each run (Python's max keeps the first), given
    the runs' starts.

    >>> best_in_runs(np.array([1.0, 3.0, 3.0, 2.0, 0.5]), np.array([0, 3])).tolist()
    [1, 3]
    """
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(scores))))
    best = np.maximum.reduceat(scores, starts) if len(starts) else np.zeros(0)
    at_best = np.flatnonzero(scores == best[group])
    _, first = np.unique(group[at_best], return_index=True)
    return at_best[first]
