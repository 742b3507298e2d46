"""Context keys as the live drafter computes them: the warehouse's keys (tables/hashing.py), each
as one residue modulo M = P1 * P2.

The warehouse packs a context's two residues as h1 * 2^31 + h2. By the Chinese remainder theorem
the pair is one number k < M (k = h1 mod P1, k = h2 mod P2), and k is the same polynomial hash
under one base B (B = B1 mod P1, B = B2 mod P2) modulo M. The map is a bijection, so the bundle's
keys match exactly the contexts (and the collisions) the warehouse's keys match, and a live key
costs one multiplication, one subtraction and one remainder on Python integers:

    prefix[i] = hash of tokens[:i],   key of tokens[a:b] = (prefix[b] - prefix[a] * B^(b-a)) mod M

>>> from specdraft.tables.hashing import window_key
>>> tokens = [5, 7, 11]
>>> prefix = prefix_hashes(tokens)
>>> window(prefix, 3, 2) == int(live_keys(np.array([window_key([7, 11])]))[0])
True
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import numpy as np

from specdraft.tables.hashing import B1, B2, P1, P2, SHIFT

M = P1 * P2
INV_P2 = pow(P2, -1, P1)  # P2^-1 mod P1
B = B2 + P2 * ((B1 - B2) * INV_P2 % P1)  # B1 mod P1, B2 mod P2


def live_keys(ctx_hash: np.ndarray) -> np.ndarray:
    """The warehouse's packed keys (h1 * 2^31 + h2) as residues mod M; int64 throughout (every
    product is below 2^62)."""
    ctx_hash = np.asarray(ctx_hash, dtype=np.int64)
    return _combine(ctx_hash // SHIFT, ctx_hash % SHIFT)


def _combine(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """k with k = h1 mod P1 and k = h2 mod P2: h2 + P2 * ((h1 - h2) * P2^-1 mod P1)."""
    return h2 + P2 * ((h1 - h2) % P1 * INV_P2 % P1)


@cache
def power(length: int) -> int:
    """B^length mod M."""
    return pow(B, length, M)


def prefix_hashes(tokens: Iterable[int]) -> list[int]:
    """prefix[i] = the hash of tokens[:i] (prefix[0] = 0)."""
    prefix = [0]
    last = 0
    for token in tokens:
        last = (last * B + token + 1) % M
        prefix.append(last)
    return prefix


def window(prefix: list[int], end: int, length: int) -> int:
    """The key of tokens[end - length:end]."""
    return (prefix[end] - prefix[end - length] * power(length)) % M


def residues(prefix: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The prefix hashes under each prime (int64 arrays), for window_keys."""
    prefix = np.asarray(prefix, dtype=np.int64)
    return prefix % P1, prefix % P2


def window_keys(prefix_residues: tuple[np.ndarray, np.ndarray], ends: np.ndarray, length: int) -> np.ndarray:
    """window() for many ends at once: numpy under the two primes (every product below 2^62), then
    combined."""
    h1, h2 = prefix_residues
    w1 = (h1[ends] - h1[ends - length] * pow(B1, length, P1) % P1) % P1
    w2 = (h2[ends] - h2[ends - length] * pow(B2, length, P2) % P2) % P2
    return _combine(w1, w2)
