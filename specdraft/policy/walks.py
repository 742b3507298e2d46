"""Decode walks: the positions a walk over each trace's response visits, all traces at once.

A walk starts at its trace's first response position and moves from position c to c + jump[c]
(the accepted tokens and the verifier's own next token, or a full draft) until it leaves the trace.
"""

from __future__ import annotations

import numpy as np


def walk_positions(jump: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The flat positions the walks visit, trace by trace and step by step (positions are laid out
    trace by trace, `offsets` giving where each trace's start, the last one the end). Every jump
    must be at least 1. All walks take their steps together: as many numpy steps as the longest
    walk has steps, instead of a Python step per visit (70,762 eval positions, 21 walks: 1.5 s).

    >>> walk_positions(np.array([2, 9, 1, 1, 3, 1]), np.array([0, 3, 3, 6])).tolist()
    [0, 2, 3, 4]
    """
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    going = starts < ends
    at, end = starts[going], ends[going]
    visited = []
    while len(at):
        visited.append(at)
        at = at + jump[at]
        inside = at < end
        at, end = at[inside], end[inside]
    # a trace's positions increase along its walk and traces lie in order: sorted is trace by
    # trace, step by step
    return np.sort(np.concatenate(visited)) if visited else np.zeros(0, dtype=np.int64)
