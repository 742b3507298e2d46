"""The vectorised decode walks (policy/walks.py) visit what a step-by-step walk visits."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specdraft.policy.draft_length import walk
from specdraft.policy.evaluate import decode_walk_from_choices
from specdraft.policy.walks import walk_positions


def stepwise(jump: list[int], offsets: list[int]) -> list[int]:
    """The walk one step at a time, as the seed's decode_step loop moves."""
    visited = []
    for start, end in itertools.pairwise(offsets):
        c = start
        while c < end:
            visited.append(c)
            c += jump[c]
    return visited


traces = st.lists(st.lists(st.integers(0, 6), max_size=30), max_size=8)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(traces=traces, draft_len=st.integers(1, 6))
def test_walks_visit_what_a_stepwise_walk_visits(traces, draft_len):
    accepted = np.array([min(a, draft_len) for trace in traces for a in trace], dtype=np.int64)
    offsets = np.cumsum([0, *map(len, traces)])
    jump = np.where(accepted == draft_len, draft_len, accepted + 1)
    expected = stepwise(jump.tolist(), offsets.tolist())
    assert walk_positions(jump, offsets).tolist() == expected
    assert decode_walk_from_choices(accepted, offsets, draft_len).tolist() == accepted[expected].tolist()
    drafted = np.array([(7 * i) % (draft_len + 1) for i in range(len(accepted))], dtype=np.int64)
    cut = np.minimum(accepted, drafted)
    steps = stepwise((cut + 1).tolist(), offsets.tolist())
    got_drafted, got_accepted = walk(accepted, drafted, offsets)
    assert got_drafted.tolist() == drafted[steps].tolist() and got_accepted.tolist() == cut[steps].tolist()
