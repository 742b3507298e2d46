"""Sorting context keys: key_order and length_key_order equal numpy's stable argsort and lexsort
(the backoff walk sorts its picks and probes with key_order, export its tables with
length_key_order), and sorted_by_key's keys are the keys in that order. The keys' modulo (mod) equals numpy's %."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specdraft.tables.hashing import (
    P1,
    P2,
    POLARS_SORT_ROWS,
    key_order,
    length_key_order,
    lexsort,
    mod,
    sorted_by_key,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(keys=st.lists(st.tuples(st.sampled_from([0, 1, 2**20, 2**61, 2**62 - 2**12]), st.integers(0, 2**12 - 1)),
                     max_size=300))
def test_key_order_is_a_stable_argsort(keys):
    """Keys that differ only in the low bits the packing drops (left in row order by the packed
    sort), equal keys, few rows."""
    keys = np.array([high + low for high, low in keys], dtype=np.int64)
    assert np.array_equal(key_order(keys), np.argsort(keys, kind="stable"))
    order, ordered = sorted_by_key(keys)
    assert np.array_equal(ordered, keys[order])


def test_key_order_on_spread_keys():
    keys = np.random.default_rng(0).integers(0, 2**62, 300_000, dtype=np.int64)
    keys[::7] = keys[3]  # duplicates, kept in row order
    keys[1000:1100] = 2**61 + np.arange(100)[::-1]  # equal but for the low bits the packing drops, descending
    assert np.array_equal(key_order(keys), np.argsort(keys, kind="stable"))
    assert np.array_equal(sorted_by_key(keys)[1], np.sort(keys))
    assert np.array_equal(sorted_by_key(keys[:1000] >> 30)[1], np.sort(keys[:1000] >> 30))  # no low bits dropped


@settings(max_examples=100, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.sampled_from([1, 4, 48]), st.sampled_from([0, 2**61, 2**62 - 2**12]),
                               st.integers(0, 2**12 - 1)), max_size=200))
def test_length_key_order_is_lexsort(rows):
    ctx_lens = np.array([ctx_len for ctx_len, _, _ in rows], dtype=np.int32)
    keys = np.array([high + low for _, high, low in rows], dtype=np.int64)
    assert np.array_equal(length_key_order(ctx_lens, keys), np.lexsort((keys, ctx_lens)))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), rows=st.sampled_from([0, 5, POLARS_SORT_ROWS + 3]))
def test_lexsort_is_numpy_lexsort(seed, rows):
    """The keys the evaluation and the token trees sort by: positions with many rows each, scores
    (negated: -0.0 ties 0.0), flags, packed token keys and draft hashes (UBIGINT: uint64 above
    2^63), each with ties the rows' order breaks;
    below and above the row count polars sorts from."""
    rng = np.random.default_rng(seed)
    keys = (rng.integers(0, 50, rows), -rng.integers(0, 3, rows) * rng.choice([0.5, 0.0], rows), rng.random(rows) < 0.5,
            rng.integers(0, 2**62, rows) >> rng.integers(0, 62),
            rng.integers(0, 2**64 - 1, rows, dtype=np.uint64, endpoint=True) >> np.uint64(rng.integers(0, 64)))
    for picked in ((0,), (1, 0), (3, 2, 1, 0), (2, 3), (0, 3, 1), (4, 2, 0)):
        chosen = [keys[i] for i in picked]
        assert np.array_equal(lexsort(chosen), np.lexsort(chosen))
        assert lexsort(chosen).dtype == np.int64


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, P1, P2, 2 * P1, P2 - 1])),
                       max_size=50),
       p=st.sampled_from([P1, P2, 5]))
def test_mod_is_numpy_remainder(values, p):
    """Any int64, either sign, the extremes (where (x // p) * p wraps around, and x minus it does
    not), multiples of the primes; into a new array and in place."""
    x = np.array(values, dtype=np.int64)
    assert np.array_equal(mod(x, p), x % p)
    expected = x % p
    mod(x, p, out=x)
    assert np.array_equal(x, expected)
