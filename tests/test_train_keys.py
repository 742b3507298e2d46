"""The train keys DuckDB builds in numpy (tables/train_keys.py) are the rows of
sql/tables/position_keys.sql (what the Spark engine builds), at every length, on random traces:
index caps that cut mid-trace, traces shorter than the draft, and an update's from_trace_id. So is
the table store_position_keys writes a chunk of traces at a time (a build past the memory budget)."""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft.config import RunConfig
from specdraft.tables import ngrams, train_keys
from specdraft.tables.hashing import hash_params, inverse_params, power_params
from specdraft.tables.train_keys import TrainKeys, chunk_bounds, store_position_keys
from specdraft.warehouse.connection import Warehouse

from .helpers import write_token_traces

COLUMNS = "trace_id, pos, token_id, continuation_hash, exact_order, backoff_order"
LENGTHS = (1, 2, 3, 5, 8)

tokens = st.lists(st.integers(0, 6), max_size=12)
traces = st.lists(st.tuples(st.sampled_from(["train", "train", "eval"]), tokens, tokens), min_size=1, max_size=7)


def sql_keys(wh: Warehouse, cfg: RunConfig, from_trace_id: int) -> None:
    """position_keys.sql's train table (the Spark engine's), as ngrams.py made it before."""
    tail = power_params(cfg.draft_len - 1)
    params = {"draft_len": cfg.draft_len, "from_trace_id": from_trace_id, "max_index_positions": cfg.max_index_positions,
              "backoff_max_index_positions": cfg.backoff_max_index_positions, "tail1": tail["pow1"],
              "tail2": tail["pow2"], **inverse_params(1), **hash_params(), "train": True, "ctx_len": list(LENGTHS)}
    wh.materialize("tables/position_keys", params, into="sql_keys", temp=True)


@contextmanager
def warehouse_with_sql_keys(tmp, traces, draft_len: int, cap: int, backoff_cap: int, from_trace: int):
    """A warehouse of `traces` with hash_powers and position_keys.sql's train table (sql_keys)."""
    path = write_token_traces(tmp / "t.parquet", traces)
    cfg = RunConfig(draft_len=draft_len, max_index_positions=cap, backoff_max_index_positions=backoff_cap,
                    max_completion_tokens=0)
    with Warehouse(tmp / "wh") as wh:
        ngrams.build_selected_traces(wh, cfg, path)
        ngrams.build_hash_powers(wh)
        sql_keys(wh, cfg, from_trace)
        yield wh


def same_rows(wh: Warehouse, a: str, b: str, columns: str) -> tuple[int, int]:
    """Rows of a not in b and of b not in a (as multisets)."""
    select = f"select {columns} from"
    return tuple(wh.run_text(f"select count(*) from ({select} {x} except all {select} {y})").fetchall()[0][0]
                 for x, y in ((a, b), (b, a)))


def column_types(wh: Warehouse, table: str) -> list[tuple[str, str]]:
    return wh.run_text(f"select column_name, column_type from (describe {table})").fetchall()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces=traces, draft_len=st.integers(1, 4), cap=st.integers(0, 30), backoff_cap=st.integers(0, 30),
       from_trace=st.integers(0, 4), block=st.sampled_from([1, 3, train_keys.KEY_BLOCK]),
       hash_block=st.sampled_from([1, 10, train_keys.HASH_BLOCK]))
def test_train_keys_are_position_keys_sql(tmp_path_factory, traces, draft_len, cap, backoff_cap, from_trace, block,
                                          hash_block):
    # KEY_BLOCK: positions keyed at a time; HASH_BLOCK: positions of whole traces summed at a time
    with warehouse_with_sql_keys(tmp_path_factory.mktemp("keys"), traces, draft_len, cap, backoff_cap,
                                 from_trace) as wh, mock.patch.object(train_keys, "KEY_BLOCK", block), \
            mock.patch.object(train_keys, "HASH_BLOCK", hash_block):
        keys = TrainKeys.build(wh, draft_len, cap, backoff_cap, from_trace)
        expected_rows = wh.run_text("select count(*) from sql_keys").fetchall()[0][0]
        assert len(keys) == expected_rows
        sql_types = dict(column_types(wh, "sql_keys"))
        for ctx_len in LENGTHS:
            wh.register("numpy_keys", keys.at(ctx_len))
            assert same_rows(wh, "sql_keys", "numpy_keys", f"{COLUMNS}, key_{ctx_len}") == (0, 0), f"key_{ctx_len}"
            assert all(sql_types[name] == kind for name, kind in column_types(wh, "numpy_keys"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces=traces, draft_len=st.integers(1, 4), cap=st.integers(0, 30), backoff_cap=st.integers(0, 30),
       from_trace=st.integers(0, 4), per_chunk=st.integers(1, 30))
def test_chunked_position_keys_are_position_keys_sql(tmp_path_factory, traces, draft_len, cap, backoff_cap,
                                                      from_trace, per_chunk):
    with warehouse_with_sql_keys(tmp_path_factory.mktemp("chunks"), traces, draft_len, cap, backoff_cap,
                                 from_trace) as wh:
        store_position_keys(wh, draft_len, cap, backoff_cap, list(LENGTHS), from_trace, per_chunk)
        keys = ", ".join(f"key_{n}" for n in LENGTHS)
        assert same_rows(wh, "sql_keys", "position_keys", f"{COLUMNS}, {keys}") == (0, 0)
        assert column_types(wh, "position_keys") == column_types(wh, "sql_keys")


def test_chunks_hold_whole_traces_within_the_limit():
    ids, sizes = np.array([2, 5, 6, 8, 9]), np.array([4, 4, 9, 1, 1])
    assert chunk_bounds(ids, sizes, 8) == [(2, 6), (6, 8), (8, 0)]  # 4+4, 9 alone (longer than 8), 1+1
    assert chunk_bounds(ids, sizes, None) == [(2, 0)]
    assert chunk_bounds(ids[:0], sizes[:0], 8) == []
    with pytest.raises(Exception, match="do not ascend"):
        chunk_bounds(np.array([3, 1]), np.array([1, 1]), 8)
