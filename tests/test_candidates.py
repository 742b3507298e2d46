"""Candidates: causal (no future tokens), real (n-gram drafts are real train continuations), and
the prompt-autocomplete lookup equal to the seed's table."""

from __future__ import annotations

import random

import pytest

from specdraft.autocomplete import SpanIndex, span_prefix_map
from specdraft.confidence import FAMILIES
from specdraft.config import RunConfig
from specdraft.pipeline import run_until
from specdraft.synthetic import generate_traces

from .helpers import write_text_traces

CFG = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0)
# with the online scenario's source too: drafts from eval traces served earlier
ONLINE = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0, online=True)


def _train_rows(n=60):
    table = generate_traces(n, seed=3, eval_fraction=0.0, calibration_fraction=0.0)
    return [("train", p, r) for p, r in zip(table.column("problem").to_pylist(),
                                             table.column("raw_reasoning").to_pylist())]


FIRST_HALF = (
    "<think>\nGiven: A train leaves at 3 pm and travels 120 miles at 40 miles per hour.\nThe train leaves at 3 pm and travels 120 miles at 40 miles per hour, so it takes "
    "120 / 40 = 3 hours and arrives at 6 pm.\n"
)
PROBLEM = "A train leaves at 3 pm and travels 120 miles at 40 miles per hour. When does it arrive?"


def _candidates(tmp_path, second_half):
    rows = _train_rows() + [
        ("calibration", PROBLEM, FIRST_HALF + "So the answer is 6 pm."),
        ("calibration", PROBLEM, FIRST_HALF + "It arrives at 6 pm."),
        ("eval", PROBLEM, FIRST_HALF + "It arrives at six."),  # served before the one checked
        ("eval", PROBLEM, FIRST_HALF + second_half),
    ]
    data = write_text_traces(tmp_path / "in.parquet", rows)
    warehouse = tmp_path / "wh"
    results = run_until("evaluate", ONLINE, warehouse, str(data), "unused", name="leak")
    from specdraft.warehouse import Warehouse

    with Warehouse(warehouse, read_only=True, dataset="leak") as wh:
        trace_id, prompt_len, tokens = wh.con.execute(
            "select trace_id, prompt_len, tokens from selected_traces where split = 'eval' "
            "order by trace_id desc limit 1").fetchall()[0]
        rows = wh.con.execute(
            "select pos, family, source, draft from candidates where trace_id = ? order by pos, source", [trace_id]
        ).fetchall()
    return results, prompt_len, tokens, rows


def test_candidates_do_not_see_future_tokens(tmp_path):
    """The eval response repeats its first half; a drafter that sees the whole trace (as the seed's
    decode-step loop does) would copy the repeat. Changing the second half must not change any
    draft made before it."""
    repeat, prompt_len, tokens_a, rows_a = _candidates(tmp_path / "a", FIRST_HALF)
    other, _, tokens_b, rows_b = _candidates(tmp_path / "b", "Then it waits for an hour before going home.")
    common = next(i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y)
    assert common > prompt_len + 20
    before_a = [r for r in rows_a if r[0] <= common]
    before_b = [r for r in rows_b if r[0] <= common]
    assert before_a and before_a == before_b
    # every source, the seed's and the ones beyond it, has drafts in the compared stretch
    assert {family for _, family, _, _ in before_a} == set(FAMILIES)
    # and the repeat is found once it is known: copy drafts after the first half
    assert any(family == "copy" and pos > common for pos, family, _, _ in rows_a)
    # the decode-step walk over the shared first half is the same too
    assert repeat["decode_step"]["positions"] >= 1 and other["decode_step"]["positions"] >= 1


def test_ngram_drafts_are_real_train_continuations(tmp_path):
    rows = _train_rows(120)
    table = generate_traces(20, seed=11, eval_fraction=0.45, calibration_fraction=0.45)
    rows += list(zip(table.column("split").to_pylist(), table.column("problem").to_pylist(),
                     table.column("raw_reasoning").to_pylist()))
    data = write_text_traces(tmp_path / "in.parquet", rows)
    run_until("candidates", CFG, tmp_path / "wh", str(data), "unused", name="real")
    from specdraft.warehouse import Warehouse

    with Warehouse(tmp_path / "wh", read_only=True, dataset="real") as wh:
        tokens = dict(wh.con.execute("select trace_id, tokens from selected_traces").fetchall())
        split = dict(wh.con.execute("select trace_id, split from selected_traces").fetchall())
        # ordered, so the 300 checked below are the same drafts on every run
        ngram = wh.con.execute("select trace_id, pos, ctx_len, draft from candidates where family = 'ngram' "
                               "order by trace_id, pos, source").fetchall()
    assert len(ngram) > 100
    train = [t for t, s in split.items() if s == "train"]
    for trace_id, pos, ctx_len, draft in ngram[:300]:
        context = tokens[trace_id][pos - ctx_len : pos]
        found = any(
            seq[p - ctx_len : p] == context and seq[p : p + len(draft)] == draft
            for t in train
            for seq in (tokens[t],)
            for p in range(ctx_len, len(seq) - len(draft) + 1)
        )
        assert found, (trace_id, pos, ctx_len)


@pytest.mark.parametrize("seed", range(6))
def test_span_index_answers_like_the_seed_table(seed):
    rng = random.Random(seed)
    words = ["Total", "cost", "of", "the", "apples", "İstanbul", "ΣΑΣ", "x=3,", "$12.50", "(b)", "ﬁnal", "ß"]
    prompt = " ".join(rng.choice(words) for _ in range(30)) + ". " + " ".join(rng.choice(words) for _ in range(12))
    table = span_prefix_map(prompt)
    index = SpanIndex(prompt)
    queries = list(table) + [k[:-1] for k in table] + [k + "z" for k in list(table)[:50]] + ["", "ab", "zzzz"]
    for query in queries:
        assert index.get(query) == table.get(query), query
