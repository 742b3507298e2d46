"""The backoff walk (every query position at once, each step probing only the lengths the last one
left possible) drafts what the seed's BackoffIndex.predict drafts, position by position, on random
repetitive traces under caps and cuts (tests/oracle.py)."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft.config import RunConfig
from specdraft.drafters.backoff_walk import LengthPicks, TablePicks, backoff_candidates
from specdraft.drafters.candidates import build_query_positions
from specdraft.tables.ngrams import build_ngram_tables
from specdraft.warehouse.connection import Warehouse

from . import oracle
from .helpers import write_token_traces

# Few distinct tokens, so that contexts of every length repeat and walks back off and climb again.
token_lists = st.lists(st.integers(0, 2), max_size=40)
splits = st.sampled_from(["train", "train", "train", "eval"])
trace_sets = st.lists(st.tuples(splits, token_lists, token_lists), min_size=2, max_size=6)
LOOKUPS = ["memory", "unsorted", "joins"]


def walked(tmp_path, traces, cfg, lookup="memory"):
    """(trace_id, pos) -> (draft, step context lengths) from the SQL tables and the walk: its picks
    searched in memory (LengthPicks) as the n-gram stage wrote them (in key order), or
    lookup="unsorted" with backoff_top_tokens' rows in another order (as the SQL file writes
    them, for a spilled or Spark build), or lookup="joins" looked up by joins (TablePicks, where
    they would not fit in the memory budget)."""
    joins = lookup == "joins"
    path = write_token_traces(tmp_path / "traces" / "t.parquet", traces)
    with Warehouse(tmp_path / "wh") as wh:
        build_ngram_tables(wh, cfg, path)
        if lookup == "unsorted":
            wh.run_text("create or replace table backoff_top_tokens as "
                        "select * from backoff_top_tokens order by hash(ctx_hash, token_id)")
        if lookup == "memory":  # as written, in key order: the picks are read without a sort
            assert all(LengthPicks.read(wh, ctx_len).rows is None for ctx_len in cfg.backoff_context_lengths)
        build_query_positions(wh, cfg)
        with mock.patch.object(LengthPicks, "fit_beside", return_value=not joins), \
                mock.patch.object(TablePicks, "find", autospec=True, side_effect=TablePicks.find) as joined:
            table = backoff_candidates(wh, cfg)
        assert joins == bool(joined.call_count) or not len(table)
        tokens = dict(wh.run_text("select trace_id, tokens from selected_traces").fetchall())
        queries = wh.run_text("select trace_id, pos from query_positions").fetchall()
    rows = zip(*(table.column(c).to_pylist() for c in ("trace_id", "pos", "draft", "step_ctx_lens")))
    return {(t, p): (d, s) for t, p, d, s in rows}, tokens, queries


def expected(traces, tokens, queries, cfg):
    kept = oracle.selected(traces, cfg.max_completion_tokens)
    train = [full for split, full, _ in kept if split == "train"]
    table, _ = oracle.backoff_table(train, cfg.backoff_context_lengths, cfg.backoff_max_index_positions)
    out = {}
    for trace_id, pos in queries:
        draft, lens = oracle.backoff_draft(table, cfg.backoff_context_lengths, cfg.backoff_min_context_len,
                                           cfg.draft_len, tokens[trace_id][:pos])
        if draft:
            out[(trace_id, pos)] = (draft, lens)
    return out


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces=trace_sets, draft_len=st.integers(1, 6), cap=st.integers(0, 60), cut=st.integers(0, 30),
       min_len=st.integers(1, 3), lookup=st.sampled_from(LOOKUPS))
def test_walk_drafts_what_the_seed_drafts(tmp_path_factory, traces, draft_len, cap, cut, min_len, lookup):
    cfg = RunConfig(draft_len=draft_len, context_lengths=(1, 2), backoff_context_lengths=(1, 2, 3, 5, 8),
                    backoff_min_context_len=min_len, backoff_max_index_positions=cap,
                    max_completion_tokens=cut)
    got, tokens, queries = walked(tmp_path_factory.mktemp("walk"), traces, cfg, lookup)
    assert got == expected(traces, tokens, queries, cfg)


@pytest.mark.parametrize("lookup", LOOKUPS)
def test_walk_climbs_back_to_long_contexts(tmp_path, lookup):
    """A hand-made case where the bound matters: after backing off to a short context, the walk
    finds longer ones again step by step (1 -> 2 -> 3 -> 5), as the seed's walk does."""
    train = [0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 2]
    traces = [("train", [], train), ("train", [], train[::-1]), ("eval", [2, 2], [1, 0, 2, 2, 1, 0, 0, 1])]
    cfg = RunConfig(draft_len=6, context_lengths=(1,), backoff_context_lengths=(1, 2, 3, 5),
                    backoff_min_context_len=1)
    got, tokens, queries = walked(tmp_path, traces, cfg, lookup)
    want = expected(traces, tokens, queries, cfg)
    assert got == want
    climbs = [lens for _, lens in want.values() if any(b > a for a, b in itertools.pairwise(lens))]
    assert climbs, "no walk climbed back: the case does not exercise the bound"
    assert np.mean([len(d) for d, _ in want.values()]) > 1
