"""Tests for the synthetic trace generator (specdraft.sources.synthetic)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdraft.errors import SpecdraftError
from specdraft.sources.synthetic import TEMPLATES, generate_problems, generate_traces, write_traces_parquet

COLUMNS = ["problem", "problem_source", "raw_reasoning", "split"]
SPLITS = {"train", "calibration", "eval"}
FINAL = re.compile(
    r"</think>\s*(?:<answer>\s*(?P<tag>.+?)\s*</answer>|.*\\boxed\{(?P<box>[^}]*)\})\.?\s*$", re.DOTALL
)
# A chain like "3 * 12 = 36", "$40 \times 5 = 200$" or "12 + 7 + 9 = 28", not starting mid-expression.
CHAIN = re.compile(r"(?<![\d.)}])(?<![-+*/] )(\d+(?: (?:[-+*/]|\\times|\\div) \d+)+) = (\d+)(?![\d.])")


def _final_answer(trace: str) -> str:
    match = FINAL.search(trace)
    assert match, f"no final answer in trace ending {trace[-80:]!r}"
    return match.group("tag") or match.group("box")


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def test_deterministic_for_same_seed_and_different_for_other_seed() -> None:
    first = generate_traces(300, seed=7)
    assert first.equals(generate_traces(300, seed=7))
    assert not first.equals(generate_traces(300, seed=8))
    assert generate_problems(50, 7) == generate_problems(50, 7)


def test_schema_and_splits() -> None:
    table = generate_traces(50, seed=0)
    assert table.column_names == COLUMNS
    assert table.num_rows == 50
    for name in COLUMNS:
        assert table.schema.field(name).type == pa.string()
    for name in ("problem", "raw_reasoning", "split"):
        assert table.column(name).null_count == 0
    splits = table.column("split").to_pylist()
    assert set(splits) == SPLITS
    for n in (3, 4, 10):
        assert set(generate_traces(n, seed=1).column("split").to_pylist()) == SPLITS


def test_split_sizes_follow_fractions() -> None:
    splits = generate_traces(1000, seed=2, eval_fraction=0.1, calibration_fraction=0.2).column("split")
    counts = {name: splits.to_pylist().count(name) for name in SPLITS}
    assert counts == {"eval": 100, "calibration": 200, "train": 700}
    with pytest.raises(SpecdraftError):
        generate_traces(10, eval_fraction=0.6, calibration_fraction=0.5)


def test_problem_source_mostly_null_sometimes_set() -> None:
    sources = generate_traces(1000, seed=3).column("problem_source").to_pylist()
    filled = [s for s in sources if s is not None]
    assert 50 <= len(filled) <= 150
    assert all(s.startswith("synthetic/") for s in filled)


def test_no_problem_in_two_splits() -> None:
    table = generate_traces(3000, seed=4)
    by_split: dict[str, set[str]] = {name: set() for name in SPLITS}
    problems, splits = table.column("problem").to_pylist(), table.column("split").to_pylist()
    for problem, split in zip(problems, splits, strict=True):
        by_split[split].add(problem)
    assert not by_split["train"] & by_split["eval"]
    assert not by_split["train"] & by_split["calibration"]
    assert not by_split["calibration"] & by_split["eval"]
    assert len(set(table.column("problem").to_pylist())) == table.num_rows


def test_final_answer_matches_record_answer() -> None:
    records = generate_problems(1000, seed=5)
    assert {rec["template"] for rec in records} == set(TEMPLATES)
    for rec in records:
        trace = rec["raw_reasoning"]
        assert trace.startswith("<think>\n")
        assert "</think>" in trace
        assert _final_answer(trace) == rec["answer"], rec["problem"]


def test_answers_match_recomputation_from_problem_text() -> None:
    checked = {"rect_area": 0, "think_number": 0, "shopping": 0}
    for rec in generate_problems(2000, seed=6):
        numbers = _ints(rec["problem"])
        if rec["template"] == "rect_area":
            length, width = numbers
            expected = length * width
        elif rec["template"] == "think_number":
            a, b, c = numbers
            assert (c - b) % a == 0
            expected = (c - b) // a
        elif rec["template"] == "shopping":
            q1, p1, q2, p2, bill = numbers
            expected = bill - q1 * p1 - q2 * p2
            assert expected >= 0
        else:
            continue
        checked[rec["template"]] += 1
        assert rec["answer"] == str(expected), rec["problem"]
        assert _final_answer(rec["raw_reasoning"]) == str(expected)
    assert all(count > 20 for count in checked.values()), checked


def test_every_written_equation_is_correct() -> None:
    n_chains = 0
    for rec in generate_problems(1000, seed=7):
        for expr, result in CHAIN.findall(rec["raw_reasoning"]):
            python_expr = expr.replace("\\times", "*").replace("\\div", "/")
            value = eval(python_expr, {"__builtins__": {}})  # digits and + - * / only, see CHAIN
            assert value == int(result), f"{expr} = {result} in {rec['problem']}"
            n_chains += 1
    assert n_chains > 2000


def test_traces_look_like_reasoning() -> None:
    table = generate_traces(3000, seed=0)
    traces = table.column("raw_reasoning").to_pylist()
    words = [len(t.split()) for t in traces]
    assert 90 <= sum(words) / len(words) <= 250
    assert min(words) >= 40
    assert max(words) >= 300
    assert any("\\frac{" in t for t in traces)
    assert any("$" in t and "\\times" in t for t in traces)
    assert any("\\boxed{" in t for t in traces) and any("<answer>" in t for t in traces)
    assert sum("Let me verify" in t for t in traces) > 100
    # Some traces repeat one of their own earlier sentences, so prefix copying has something to find.
    repeating = 0
    for trace in traces:
        lines = [s for s in re.split(r"(?<=[.?!])\s+", trace) if len(s) > 30]
        repeating += len(lines) != len(set(lines))
    assert repeating > 300
    # Traces restate the problem, so copying from the prompt helps.
    problems = table.column("problem").to_pylist()
    assert sum(p.split(". ")[0] in t for p, t in zip(problems, traces, strict=True)) > 2000


def test_write_traces_parquet(tmp_path) -> None:
    path = write_traces_parquet(tmp_path / "sub" / "traces.parquet", n_traces=120, seed=9)
    assert path.exists()
    table = pq.read_table(path)
    assert table.num_rows == 120
    assert table.column_names == COLUMNS
    assert table.equals(generate_traces(120, seed=9))
    write_traces_parquet(tmp_path / "again.parquet", n_traces=120, seed=9)
    assert pq.read_table(tmp_path / "again.parquet").equals(table)


def test_held_out_splits_are_capped_for_big_corpora():
    splits = generate_traces(12_000, seed=3, max_heldout=400).column("split").to_pylist()
    assert splits.count("eval") == 400 and splits.count("calibration") == 400
    small = generate_traces(1000, seed=3, max_heldout=400).column("split").to_pylist()
    assert small.count("eval") == 50  # 5% of 1000, under the cap
