"""The n-gram's choice by support (drafters/ngram_paths.py, --preset default): per context, the
continuation whose supports (the summed counts of those sharing its first 1, 2, ... tokens) are
the greatest element by element, ties to the more frequent; equal to a plain Python reading of
that rule, on random contexts and in a built warehouse, where ngram_choices then numbers it 1 and
the others in count order (and under --preset seed is the count ranking itself)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdraft.config import RunConfig
from specdraft.drafters.ngram_paths import path_choices
from specdraft.pipeline import RunInputs, run_until
from specdraft.sources.synthetic import generate_traces
from specdraft.warehouse.connection import Warehouse

from .helpers import write_text_traces


def supported_rank(continuations: list[tuple[int, int, list[int]]]) -> int:
    """The rule as written: continuations are (rank, count, tokens)."""
    def supports(tokens):
        return [sum(count for _, count, other in continuations if other[:d] == tokens[:d])
                for d in range(1, len(tokens) + 1)]

    return max(continuations, key=lambda c: (supports(c[2]), -c[0]))[0]


# up to 8 continuations a context over 3 token ids (so that they share first tokens), 1-5 tokens
# long, counts falling with the rank as exact_continuations' do; small counts (1-3, as most are)
# tie often, so that the prefixes tied at one depth are told apart at the next by their own rows
contexts = st.lists(
    st.lists(st.tuples(st.one_of(st.integers(1, 3), st.integers(1, 30)),
                       st.lists(st.integers(0, 2), min_size=1, max_size=5)),
             min_size=1, max_size=8),
    min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(contexts=contexts, id_offset=st.sampled_from([0, 151_000]))
def test_path_choice_is_the_rule(contexts, id_offset):
    rows, want = [], []
    for i, drafts in enumerate(contexts):
        ranked = sorted(drafts, key=lambda d: -d[0])
        context = [(rank, count, [t + id_offset for t in tokens]) for rank, (count, tokens) in enumerate(ranked, 1)]
        ctx_len, ctx_hash = 1 + i % 3, 1000 - i  # several lengths, hashes not in row order
        rows += [(ctx_len, ctx_hash, rank, count, tokens) for rank, count, tokens in context]
        want.append({"ctx_len": ctx_len, "ctx_hash": ctx_hash, "rank": supported_rank(context)})
    rows.sort(key=lambda row: row[:3])
    table = pa.table(dict(zip(("ctx_len", "ctx_hash", "rank", "count"), map(list, zip(*(row[:4] for row in rows))))))
    tokens = np.full((len(rows), 5), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        tokens[i, : len(row[4])] = row[4]
    got = path_choices(table, tokens).to_pylist()
    assert sorted(got, key=lambda r: (r["ctx_len"], r["ctx_hash"])) == sorted(want, key=lambda r: (r["ctx_len"], r["ctx_hash"]))


@pytest.mark.parametrize("preset", ["default", "seed"])
def test_warehouse_choices_number_the_path_first_then_by_count(tmp_path, preset):
    """ngram_choices against exact_continuations and the rule: choice 1 the supported path's
    continuation (--preset seed: the most frequent), choice 2 the most frequent of the others."""
    table = generate_traces(60, seed=5, eval_fraction=0.2, calibration_fraction=0.2)
    data = write_text_traces(tmp_path / "in.parquet", list(zip(*(table.column(c).to_pylist()
                                                                 for c in ("split", "problem", "raw_reasoning")))))
    cfg = RunConfig(max_completion_tokens=200, preset=preset)
    run_until("candidates", cfg, RunInputs(tmp_path / "wh", str(data), name="paths"))
    with Warehouse(tmp_path / "wh", read_only=True, dataset="paths") as wh:
        tokens = dict(wh.run_text("select trace_id, tokens from selected_traces").fetchall())
        ranked = wh.run_text("select ctx_len, ctx_hash, rank, count, src_trace_id, src_pos "
                             "from exact_continuations order by ctx_len, ctx_hash, rank").fetchall()
        got = {(l, h, c): r for l, h, c, r in wh.run_text("select ctx_len, ctx_hash, choice, rank "
                                                            "from ngram_choices").fetchall()}
    by_context: dict[tuple[int, int], list] = {}
    for ctx_len, ctx_hash, rank, count, trace_id, pos in ranked:
        by_context.setdefault((ctx_len, ctx_hash), []).append(
            (rank, count, tokens[trace_id][pos : pos + cfg.draft_len]))
    want, moved = {}, 0
    for (ctx_len, ctx_hash), context in by_context.items():
        first = supported_rank(context) if preset == "default" else 1
        order = [first, *(rank for rank, _, _ in context if rank != first)]
        want.update({(ctx_len, ctx_hash, choice): rank for choice, rank in enumerate(order[:2], 1)})
        moved += first != 1
    assert got == want
    assert (moved > 20) == (preset == "default")  # the rule chose others than the most frequent
