"""The train positions' context keys, one context length at a time, in numpy (DuckDB builds).

sql/tables/position_keys.sql makes every train position's key at every table length in one
table: two window passes over all positions (running sums, then a lag per length), 17 columns
wide. Here the same keys come from the same prefix sums, but a lag is a shift of a flat array
(the positions are laid out trace by trace, in position order), so no window sorts anything, and
only one length's key column exists at a time: the n-gram and backoff tables of a length read
`position_keys` as an Arrow table registered for that length (TrainKeys.at), with the columns of
the SQL table that length_keys.sql reads. On the development set (2.33M train positions) the SQL
table took 1.8-2.1 s and about 300 MB; on all 25,676 train rows (8.5M positions) 8.1 s and 1.1 GB.

The arithmetic is position_keys.sql's (see it and hashing.py): with term = (token_id + 1) * B^-pos
mod p and c(pos) the sum of the terms before pos,

    key_L(pos)            = (c(pos) - c(pos - L)) mod p * B^(pos - 1) mod p     (pos >= L)
    continuation_hash(pos) = (c(pos + draft_len) - c(pos)) mod p * B^(pos + draft_len - 1) mod p

with the trace's whole sum for c past its end, packed as h1 * 2^31 + h2; the powers are read from
the hash_powers table the SQL uses. Every product stays below 2^62 in int64. The Spark engine
keeps the SQL table (tests/test_train_keys.py checks the two equal).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from specdraft.config import NUMPY_THREADS
from specdraft.errors import SpecdraftError
from specdraft.tables.hashing import P1, P2, SHIFT, inverse_params, mod, power_params
from specdraft.warehouse.connection import Warehouse

BATCH_ROWS = 1 << 17  # rows per Arrow record batch: DuckDB scans batches in parallel
KEY_BLOCK = 1 << 16  # positions hashed at a time (TrainKeys.key)
HASH_BLOCK = 1 << 19  # positions of whole traces summed at a time (TrainKeys.build), a block a thread
# What a train position holds while the keys exist: base (trace_id, pos, token_id: 4 bytes each;
# continuation_hash, exact_order, backoff_order: 8), prefix sums and end powers under two primes
# (32), one length's key (8) and its Arrow copy with the other columns' (another 44, at() copies
# nothing else)
BYTES_PER_POSITION = 36 + 32 + 16
# What a chunk of store_position_keys holds a position: TrainKeys without the one key (76), and
# the wide table's base columns (36); plus 8 per key column
WIDE_BYTES_PER_POSITION = 76 + 36
_PRIMES = (P1, P2)



@dataclass
class TrainKeys:
    """Every selected train position from trace `from_trace_id` on (all of them in a full build),
    with what each length's key is made of."""

    base: dict[str, np.ndarray]  # trace_id, pos, token_id, continuation_hash, exact_order, backoff_order
    has_exact: np.ndarray  # exact_order is not null
    has_backoff: np.ndarray
    prefix: tuple[np.ndarray, np.ndarray]  # c(pos) mod p, per prime
    end_pow: tuple[np.ndarray, np.ndarray]  # B^(pos - 1) mod p, per prime
    _columns: dict[str, pa.Array] | None = field(default=None, init=False, repr=False)  # _base_columns()

    @staticmethod
    def fit_beside(wh: Warehouse, from_trace_id: int = 0) -> bool:
        """Do the train keys fit in half of what the run's memory budget leaves beside DuckDB's
        share (--memory-limit; DuckDB spills past its own)? They are numpy arrays DuckDB does not
        count: BYTES_PER_POSITION a train position. On the development set 2.3M positions take
        196 MB; 200,000 synthetic traces' 49M would take 4.1 GB, past a 5GB budget."""
        if wh.memory_limit is None:
            return True
        (positions,), = wh.query("tables/train_positions", {"from_trace_id": from_trace_id}).fetchall()
        return wh.fits_beside_duckdb((positions or 0) * BYTES_PER_POSITION)

    @classmethod
    def build(cls, wh: Warehouse, draft_len: int, max_index_positions: int, backoff_max_index_positions: int,
              from_trace_id: int = 0, to_trace_id: int = 0) -> TrainKeys:
        """From selected_traces and hash_powers (build_hash_powers): the train traces from
        from_trace_id on, and before to_trace_id unless it is 0. The index orders count every
        selected train trace before a trace, as position_keys.sql's do."""
        traces = wh.query("tables/train_traces", {"draft_len": draft_len, "from_trace_id": from_trace_id,
                                                  "to_trace_id": to_trace_id}).to_arrow_table()
        n_tokens = traces.column("n_tokens").to_numpy().astype(np.int64)
        tokens = traces.column("tokens").combine_chunks()
        token_id = tokens.flatten().to_numpy(zero_copy_only=False).astype(np.int32)
        n = len(token_id)
        starts = np.cumsum(n_tokens) - n_tokens
        row_trace = np.repeat(np.arange(len(n_tokens)), n_tokens)
        pos = np.arange(n, dtype=np.int64) - starts[row_trace]
        trace_len = n_tokens[row_trace]

        powers = wh.query("tables/hash_power_rows").fetchnumpy()
        if n and len(powers["pos"]) < int(n_tokens.max()):
            raise SpecdraftError("hash_powers is shorter than the longest train trace (build_hash_powers first)")
        # B^pos and B^-pos by position, per prime (read once, gathered by each block)
        b, binv = ([powers[f"{name}{i + 1}"].astype(np.int64) for i in range(len(_PRIMES))] for name in ("b", "binv"))
        prefix = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
        end_pow = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
        continuation = np.empty(n, dtype=np.int64)

        def hash_block(first: int, stop: int) -> None:
            """The sums of traces first..stop - 1, whose positions are consecutive: each trace's
            sums start at its own first position, so a block of whole traces is its own."""
            lo, hi = int(starts[first]), int(starts[first] + n_tokens[first:stop].sum())
            if hi == lo:
                return
            block_pos, block_len = pos[lo:hi], trace_len[lo:hi]
            block_trace = row_trace[lo:hi] - first
            block_starts, block_sizes = starts[first:stop] - lo, n_tokens[first:stop]
            values = token_id[lo:hi].astype(np.int64) + 1
            ahead = np.minimum(np.arange(hi - lo, dtype=np.int64) + draft_len, hi - lo - 1)
            inside = block_pos + draft_len < block_len
            hashes = []
            for i, p in enumerate(_PRIMES):
                b_pos = b[i][block_pos]
                term = mod(values * binv[i][block_pos], p)
                running = np.cumsum(term)  # exact: below 2^62 for traces under 2^31 tokens
                before = running - term
                c = before - before[block_starts][block_trace]  # the sum of the terms before pos, in its trace
                total = (running[block_starts + block_sizes - 1] - before[block_starts])[block_trace]
                c_ahead = np.where(inside, c[ahead], total)
                tail_pow = mod(b_pos * tail[f"pow{i + 1}"], p)
                hashes.append(mod(mod(c_ahead - c, p) * tail_pow, p))
                mod(c, p, out=prefix[i][lo:hi])
                mod(b_pos * inverse[f"inv{i + 1}"], p, out=end_pow[i][lo:hi])
            np.add(hashes[0] * SHIFT, hashes[1], out=continuation[lo:hi])

        tail = power_params(draft_len - 1)
        inverse = inverse_params(1)
        # blocks of whole traces on two threads (numpy lets go of the GIL): each block's temporaries
        # are a few of its own size, so two at a time hold less than one pass over every position
        blocks = chunk_bounds(np.arange(len(n_tokens)), n_tokens, HASH_BLOCK)
        with ThreadPoolExecutor(max_workers=NUMPY_THREADS, thread_name_prefix="train-keys") as pool:
            list(pool.map(lambda block: hash_block(block[0], block[1] or len(n_tokens)), blocks))

        exact_before = traces.column("exact_before").to_numpy().astype(np.int64)[row_trace]
        backoff_before = traces.column("backoff_before").to_numpy().astype(np.int64)[row_trace]
        exact_order = exact_before + pos
        has_exact = pos < trace_len - draft_len
        if max_index_positions:
            has_exact &= exact_order < max_index_positions
        backoff_order = backoff_before + pos
        has_backoff = np.ones(n, dtype=bool)
        if backoff_max_index_positions:
            has_backoff &= backoff_order < backoff_max_index_positions
        base = {
            "trace_id": traces.column("trace_id").to_numpy().astype(np.int32)[row_trace],
            "pos": pos.astype(np.int32),
            "token_id": token_id,
            "continuation_hash": continuation,
            "exact_order": exact_order,
            "backoff_order": backoff_order,
        }
        return cls(base, has_exact, has_backoff, prefix, end_pow)

    def __len__(self) -> int:
        return len(self.base["pos"])

    def key(self, ctx_len: int) -> tuple[np.ndarray, np.ndarray]:
        """key_<ctx_len> of every position, and where it is defined (pos >= ctx_len). Made
        KEY_BLOCK positions at a time, so the temporaries stay in the CPU cache: 25-35% faster
        than whole-array steps on 3.6M positions."""
        n = len(self)
        key = np.zeros(n, dtype=np.int64)
        for lo in range(ctx_len, n, KEY_BLOCK):
            hi = min(lo + KEY_BLOCK, n)
            out = key[lo:hi]
            for c, end, p in zip(self.prefix, self.end_pow, _PRIMES, strict=True):
                # c(pos) - c(pos - L) mod p, as c(pos) + (p - c(pos - L)) in [1, 2p): times B^(pos - 1)
                # (below p) it stays under 2p^2 < 2^63, so one division (the slow part) is left
                h = c[lo:hi] + p
                h -= c[lo - ctx_len : hi - ctx_len]
                h *= end[lo:hi]
                mod(h, p, out=h)
                out *= SHIFT
                out += h
        return key, self.base["pos"] >= ctx_len

    def wide(self, lengths: list[int]) -> pa.Table:
        """position_keys.sql's table itself: its columns, with a key column per length."""
        base = self._base_columns()
        columns = {name: base[name] for name in ("trace_id", "pos", "token_id")}
        for ctx_len in lengths:
            key, defined = self.key(ctx_len)
            columns[f"key_{ctx_len}"] = pa.array(key, mask=~defined)
        columns.update((name, base[name]) for name in ("continuation_hash", "exact_order", "backoff_order"))
        return pa.table(columns)

    def at(self, ctx_len: int) -> pa.Table:
        """position_keys as length_keys.sql reads it at ctx_len: the columns of
        position_keys.sql's table, with key_<ctx_len> its only key."""
        columns = dict(self._base_columns())
        key, defined = self.key(ctx_len)
        columns[f"key_{ctx_len}"] = pa.array(key, mask=~defined)
        table = pa.table(columns)
        return pa.Table.from_batches(table.to_batches(max_chunksize=BATCH_ROWS), schema=table.schema)

    def _base_columns(self) -> dict[str, pa.Array]:
        """position_keys' columns but the keys, as Arrow arrays (the index orders null where a
        cap or the draft's end leaves the position out); made once, the same at every length."""
        if self._columns is None:
            self._columns = {
                "trace_id": pa.array(self.base["trace_id"]),
                "pos": pa.array(self.base["pos"]),
                "token_id": pa.array(self.base["token_id"]),
                "continuation_hash": pa.array(self.base["continuation_hash"]),
                "exact_order": pa.array(self.base["exact_order"], mask=~self.has_exact),
                "backoff_order": pa.array(self.base["backoff_order"], mask=~self.has_backoff),
            }
        return self._columns


def store_position_keys(wh: Warehouse, draft_len: int, max_index_positions: int, backoff_max_index_positions: int,
                        lengths: list[int], from_trace_id: int = 0, positions_per_chunk: int | None = None) -> None:
    """position_keys.sql's train table (read as position_keys: a Parquet file in the warehouse's
    tmp/, Warehouse.store_spilled), made here a chunk of train traces at a time: for a build
    whose train keys do not fit in memory at once (fit_beside). Two chunks hold as many traces as
    fit in the room beside DuckDB (Warehouse.room_beside_duckdb) at WIDE_BYTES_PER_POSITION (or a
    chunk positions_per_chunk), so no window sorts the whole train split as the SQL does (on
    200,000 synthetic traces, 48.9M positions, the SQL took 82 s). A chunk is written while the
    next is made: there, 23.9 and 27.5 s against 39.0 s one after the other."""
    sizes = wh.query("tables/train_trace_sizes", {"from_trace_id": from_trace_id}).fetchnumpy()
    if positions_per_chunk is None:
        room = wh.room_beside_duckdb()
        # two chunks at a time: one written while the next is made (store_spilled)
        positions_per_chunk = max(1, room // 2 // (WIDE_BYTES_PER_POSITION + 8 * len(lengths))) if room else None
    bounds = chunk_bounds(sizes["trace_id"], sizes["n_tokens"], positions_per_chunk)

    def chunks():
        # without train positions, one empty chunk: the table with no rows, as the SQL would make it
        for first, stop in bounds or [(from_trace_id, 0)]:
            yield TrainKeys.build(wh, draft_len, max_index_positions, backoff_max_index_positions, first,
                                  stop).wide(lengths)

    wh.store_spilled("position_keys", chunks())


def chunk_bounds(trace_ids: np.ndarray, n_tokens: np.ndarray, positions: int | None) -> list[tuple[int, int]]:
    """Consecutive runs of traces (in train order, whose trace ids ascend) of at most `positions`
    tokens each (a longer trace alone), as (first trace id, the next run's first or 0 for the last).

    >>> chunk_bounds(np.array([3, 4, 7, 9]), np.array([5, 5, 5, 20]), 10)
    [(3, 7), (7, 9), (9, 0)]
    """
    if len(trace_ids) and np.any(np.diff(trace_ids) <= 0):
        raise SpecdraftError("selected_traces: train trace ids do not ascend in train order")
    starts, total = [], 0
    for i, n in enumerate(n_tokens.tolist()):
        if not starts or (positions and total + n > positions):
            starts.append(i)
            total = 0
        total += n
    firsts = [int(trace_ids[i]) for i in starts]
    return list(zip(firsts, [*firsts[1:], 0]))
