"""Context keys: a polynomial rolling hash under two 31-bit primes, packed into one BIGINT.

The key of a token window w_0..w_{L-1} is

    h_p = sum_i (w_i + 1) * B_p^(L-1-i)  mod p        for (B_p, p) in ((B1, P1), (B2, P2))
    key = h_P1 * 2^31 + h_P2

Every product is below 2^62, so any SQL engine with 64-bit integers (DuckDB, Spark) and
numpy compute the same keys; no engine's internal hash function is used. In SQL the key of
a window is the difference of two prefix hashes (sql/tables/position_keys.sql).

>>> window_key([5, 7]) == ((6 * B1 + 8) % P1) * 2**31 + (6 * B2 + 8) % P2
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

POLARS_SORT_ROWS = 4096  # fewer rows than this are sorted by numpy (lexsort)
P1 = 2_147_483_647  # 2^31 - 1
P2 = 2_147_483_629
B1 = 911_382_323
B2 = 972_663_749
SHIFT = 2**31


def hash_params() -> dict[str, int]:
    """The moduli, bound into every SQL file that computes keys."""
    return {"p1": P1, "p2": P2}


def power_params(n: int) -> dict[str, int]:
    """B^n under both primes, as SQL parameters."""
    return {"pow1": pow(B1, n, P1), "pow2": pow(B2, n, P2)}


def inverse_params(n: int) -> dict[str, int]:
    """B^-n under both primes (the primes make B invertible), as SQL parameters."""
    return {"inv1": pow(B1, -n, P1), "inv2": pow(B2, -n, P2)}


def mod(x: np.ndarray, p: int, out: np.ndarray | None = None) -> np.ndarray:
    """x % p for int64 arrays, exactly (x == (x // p) * p + x % p, floor semantics for any sign),
    written to out (which may be x). numpy divides by a scalar with libdivide in floor_divide but
    with a hardware division per element in remainder: x - (x // p) * p takes half the time of
    x % p on large arrays, a third on cache-sized blocks (4M keys: 19 ms against 41 ms).

    >>> mod(np.array([-3, 0, 6, 2**62]), 5).tolist() == [-3 % 5, 0, 6 % 5, 2**62 % 5]
    True
    """
    quotient = np.floor_divide(x, p)
    quotient *= p
    return np.subtract(x, quotient, out=out)


def window_key(tokens: Sequence[int]) -> int:
    """The context key of a token window (pure-Python oracle of the SQL keys)."""
    h1 = h2 = 0
    for token in tokens:
        h1 = (h1 * B1 + token + 1) % P1
        h2 = (h2 * B2 + token + 1) % P2
    return h1 * SHIFT + h2


class RowPrefixHashes:
    """Prefix hashes of the rows of a token matrix, for vectorised window keys.

    Column c of `h1`/`h2` holds the hash of row[:c]; the key of row[a:b] is then
    h[b] - h[a] * B^(b-a). Columns can be appended one token at a time.

    Every step reads and writes whole columns, so the matrices are column-major (order="F"): with
    rows of 65 int64s (the seed's flags), a row-major column is one cache line per row: for 110,000
    synthetic 48-token windows, building took 0.63 s against 0.36 s, and 16 steps of keys at
    8 lengths 0.60 s against 0.30 s.
    """

    def __init__(self, tokens: np.ndarray, capacity: int) -> None:
        n_rows, n_cols = tokens.shape
        tokens = np.asfortranarray(tokens)
        self.h1 = np.zeros((n_rows, capacity + 1), dtype=np.int64, order="F")
        self.h2 = np.zeros((n_rows, capacity + 1), dtype=np.int64, order="F")
        self.width = 0
        for col in range(n_cols):
            self.append(tokens[:, col])

    def append(self, column: np.ndarray) -> None:
        c = self.width
        values = column.astype(np.int64) + 1
        mod(self.h1[:, c] * B1 + values, P1, out=self.h1[:, c + 1])
        mod(self.h2[:, c] * B2 + values, P2, out=self.h2[:, c + 1])
        self.width += 1

    def window_keys(self, rows: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Keys of row[start:stop] for the given row indices."""
        length = stop - start
        w1 = mod(self.h1[rows, stop] - mod(self.h1[rows, start] * pow(B1, length, P1), P1), P1)
        w2 = mod(self.h2[rows, stop] - mod(self.h2[rows, start] * pow(B2, length, P2), P2), P2)
        return w1 * SHIFT + w2


def packed_token_keys(tokens: np.ndarray) -> list[np.ndarray]:
    """The rows' tokens (-1 past a draft's end) packed several to an int64, the earlier token in the
    higher bits, as np.lexsort keys (the last the primary): they sort rows in the order that one key
    per token column does (each id + 1 fits its bits, and -1 becomes 0, below every id), with 6
    keys instead of 16 for Qwen's 151,665 ids (18 bits, 3 to a key): the evaluate stage's trees
    sorted 560,000 drafts in half the time.

    >>> tokens = np.array([[5, 1, -1], [5, 0, 7], [4, 9, 9]])
    >>> np.lexsort(packed_token_keys(tokens)).tolist()
    [2, 1, 0]
    """
    return packed_keys(tokens + 1)


def prefix_order(tokens: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows (tokens, -1 past each one's end) sorted by group and then token by token, so that
    the rows of a group sharing their first d tokens are consecutive and a shorter row comes before
    the longer ones it starts; and how many leading tokens each sorted row shares with the row
    before it in its group (0 for a group's first row; the -1s are never shared).

    >>> order, shared = prefix_order(np.array([[4, 2, -1], [4, 1, 5], [3, 3, 3], [4, 2, 7], [4, 2, -1]]),
    ...                              np.zeros(5))
    >>> order.tolist(), shared.tolist()
    ([2, 1, 0, 4, 3], [0, 0, 1, 2, 2])
    """
    order = lexsort((*packed_token_keys(tokens), group))
    tokens, group = tokens[order], group[order]
    same = np.cumprod((tokens[1:] == tokens[:-1]) & (tokens[1:] >= 0), axis=1).sum(axis=1)
    return order, np.r_[0, np.where(group[1:] == group[:-1], same, 0)]


def packed_keys(values: np.ndarray) -> list[np.ndarray]:
    """np.lexsort keys (the last the primary) that sort rows of non-negative ints as one key per
    column would, the first column first: the columns packed several to an int64, each in as many
    bits as the largest value needs, the earlier column in the higher bits.

    >>> np.lexsort(packed_keys(np.array([[3, 0], [1, 7], [1, 2]]))).tolist()
    [2, 1, 0]
    """
    n, width = values.shape
    bits = max(int(values.max(initial=0)), 1).bit_length()
    per = max(63 // bits, 1)
    keys = []
    for start in range(0, width, per):
        key = np.zeros(n, dtype=np.int64)
        for j in range(start, min(start + per, width)):
            key <<= bits
            key |= values[:, j]
        keys.append(key)
    return keys[::-1]


def key_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") for non-negative int64 keys, 2-3x faster where the keys
    are spread like the context keys (sorted_by_key). On the 1.46M backoff picks of length 16,
    shuffled: 58 ms against 137 ms (114 ms with np.sort in place of sort_values)."""
    return sorted_by_key(keys)[0]


def sorted_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """key_order(keys), and the keys in that order. Each key's top bits and its row number are
    packed into one int64 and sorted by value (sort_values; an argsort moves indexes with every
    compare). Rows whose kept top bits tie are left in row order, their row numbers being the low
    bits: where their keys differ, they are then sorted by the whole key."""
    n = len(keys)
    if n < 2 or keys.dtype != np.int64 or keys.min() < 0:
        order = np.argsort(keys, kind="stable")
        return order, keys[order]
    row_bits = (n - 1).bit_length()
    drop = max(0, int(keys.max()).bit_length() + row_bits - 63)  # low key bits that do not fit
    packed = (keys >> drop) << row_bits
    packed |= np.arange(n, dtype=np.int64)
    packed = sort_values(packed)
    order = packed & ((1 << row_bits) - 1)
    top = packed >> row_bits
    if not drop:
        return order, top
    tied = top[1:] == top[:-1]
    ordered = keys[order]
    mixed_pairs = tied & (ordered[1:] != ordered[:-1])
    if mixed_pairs.any():
        # only the runs of tied top bits whose keys differ: a run of one key (the repeats of a
        # context) is in row order already. The 2.2M train keys of length 4 on the development
        # set (483k distinct) sorted in 0.22 s against 0.75 s sorting every tie
        run = np.cumsum(np.r_[0, ~tied])
        at = np.flatnonzero(np.isin(run, run[1:][mixed_pairs]))
        rows = order[at]  # within them by the whole key, then row (stable)
        order[at] = rows[lexsort((rows, keys[rows], top[at]))]
        ordered[at] = keys[order[at]]
    return order, ordered


def sort_values(values: np.ndarray) -> np.ndarray:
    """np.sort(values) of int64 values, 3x faster: polars' sort, on one core (2.3M packed keys in
    37-45 ms against np.sort's 127 ms on this machine, numpy 2.4, whose sort ran at std::sort's
    speed). It lets go of the GIL, as the backoff picks' and the walk's threads need, and keeps
    off polars' thread pool: its sorts run beside DuckDB's and LightGBM's threads on 2 cores. The
    array returned is read-only (polars' own buffer)."""
    return pl.Series(values).sort(multithreaded=False).to_numpy()


def lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """np.lexsort(keys): the rows by the last key, then the one before it, and so on, ties in row
    order; by polars' multi-column sort on one core (as sort_values), 2.5x faster (900,000 rows by
    position and score: 88 ms against 227 ms). Few rows go to numpy, which starts faster."""
    keys = [np.asarray(key) for key in keys]
    if len(keys[-1]) < POLARS_SORT_ROWS:
        return np.lexsort(keys)
    columns = {f"key{i}": key for i, key in enumerate(reversed(keys))}
    order = pl.DataFrame(columns).select(pl.arg_sort_by(list(columns), maintain_order=True, multithreaded=False))
    return order.to_series().to_numpy().astype(np.int64)


def length_key_order(ctx_lens: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """np.lexsort((keys, ctx_lens)): rows by context length, then key (stable), each length's
    rows ordered with key_order. On 15M random keys of 12 lengths, 1.8 s against lexsort's 6.8 s."""
    ctx_lens = np.asarray(ctx_lens)
    parts = []
    for ctx_len in np.unique(ctx_lens):
        rows = np.flatnonzero(ctx_lens == ctx_len)
        parts.append(rows[key_order(keys[rows])])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
