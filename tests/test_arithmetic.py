"""The arithmetic source (drafters/arithmetic.py): exact results of the calculation just written
out, GSM8K's calculator annotations, and nothing where the text is not arithmetic."""

from __future__ import annotations

import pytest

from specdraft.drafters.arithmetic import TAIL_TOKENS, Arithmetic, calculate, draft_text
from specdraft.sources.tokenizer import load_tokenizer


@pytest.mark.parametrize(("expression", "value"), [
    ("2 + 3 * 4", "14"),
    ("(2 + 3) * 4", "20"),
    ("10 - 4 - 3", "3"),  # left to right
    ("48 / 2 / 2", "12"),
    ("22 x 5", "110"),
    ("6 \\times 7", "42"),
    ("9 \\div 4", "2.25"),
    ("0.1 + 0.2", "0.3"),  # exact, not binary floating point
    ("2.5 * 4", "10"),
    ("2 + 3^2 * 2", "20"),
    ("(1 + 1)^10", "1024"),
    ("2^0.5", None),
    ("2^65", None),  # exponents up to 64
    ("1 / 3", None),  # no terminating decimal
    ("5 / 0", None),
    ("3 - 8", None),  # negative
    ("2 + y", None),
    ("(2 + 3", "5"),  # an opening parenthesis the expression does not close is not part of it
    ("2 + 3)", None),
    ("2 +", None),
])
def test_calculate(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(("tail", "draft"), [
    ("Ricardo can get 22 x 5 = ", "110"),
    ("Ricardo can get 22 x 5 =", " 110"),  # spaced as the expression is
    ("There are 3*5=", "15"),
    ("so 22 x 5 = 1", "10"),  # the result begun
    ("so 22 x 5 = 110", None),  # and finished
    ("so 22 x 5 = 120", None),  # a different result is being written
    ("Ricardo can get 22 x 5 = <<", "22*5=110>>110"),
    ("He would eat 4 x 5 =<<4*5=", "20>>20"),
    ("<<4*5=2", "0>>20"),
    ("<<4*5=20>>", "20"),
    ("<<4*5=20>>2", "0"),
    ("\\(a - b = 4 - 4 = ", "0"),
    ("giving us \\(3 \\times 4 + 2 \\times 2 = ", "16"),  # LaTeX's "\\(" opens no group of the sum
    ("\\left(x + 1\\right)^2 = 5^2 = ", "25"),
    ("then 2y + 3 = ", None),  # a variable's term: 3 = is not a calculation
    ("x_1 + 3 = ", None),
    ("the answer is 42", None),
    ("", None),
])
def test_draft_text(tail, draft):
    assert draft_text(tail) == draft


@pytest.fixture(scope="module")
def qwen():
    return load_tokenizer("Qwen/Qwen2.5-7B-Instruct")


def test_drafts_are_the_traces_tokens_with_the_real_tokenizer(qwen):
    """At each position of a real tokenized text, the draft (if any) reads only the tokens before
    it, and where a calculation's result follows it is the trace's own next tokens."""
    text = "He buys 22 x 5 = <<22*5=110>>110 tomatoes, and 0.5 * 3 = 1.5 kg of rice.\n"
    tokens = qwen.encode(text)
    drafter = Arithmetic(qwen, draft_len=16)
    accepted = {}
    for known in range(1, len(tokens)):
        draft = drafter.propose(tokens, known)
        if draft is None:
            continue
        assert draft == drafter.propose(tokens[:known] + [0, 1, 2], known)  # the future is not read
        matched = 0
        while matched < len(draft) and known + matched < len(tokens) and draft[matched] == tokens[known + matched]:
            matched += 1
        accepted[qwen.decode(tokens[:known])] = (qwen.decode(list(draft)), matched == len(draft))
    head = "He buys 22 x 5 = <<22*5="
    rice = "He buys 22 x 5 = <<22*5=110>>110 tomatoes, and 0.5 * 3 ="
    assert accepted == {
        "He buys 22 x 5 =": (" 110", False),  # (the annotation comes first: " <<" is the next token)
        "He buys 22 x 5 = <<": ("22*5=110>>110", True),
        head: ("110>>110", True),
        head + "1": ("10>>110", True),
        head + "11": ("0>>110", True),
        head + "110>>": ("110", True),
        head + "110>>1": ("10", True),
        head + "110>>11": ("0", True),
        rice: (" 1.5", True),
        rice + " ": ("1.5", True),
        rice + " 1": (".5", True),
        rice + " 1.": ("5", True),
    }


def test_the_tail_is_the_last_tokens_only(qwen):
    """A calculation further back than TAIL_TOKENS tokens is not read (the same window live)."""
    tokens = qwen.encode("5 + 5 =" + " and" * TAIL_TOKENS)
    drafter = Arithmetic(qwen, draft_len=16)
    assert drafter.propose(tokens, len(qwen.encode("5 + 5 ="))) == tuple(qwen.encode(" 10"))
    assert drafter.propose(tokens, len(tokens)) is None


def test_drafts_at_many_positions_are_those_of_each_position(qwen):
    """propose_at (the candidates stage's, in numpy over one trace) drafts exactly where and what
    propose (the live drafter's, one position) does: at every position of texts with calculations
    near and beyond the tail, annotations, LaTeX and characters split across tokens."""
    texts = [
        "He buys 22 x 5 = <<22*5=110>>110 tomatoes, and 0.5 * 3 = 1.5 kg of rice.\n",
        "5 + 5 =" + " and" * TAIL_TOKENS + " 7 * 6 = 4",
        "So \\(3 \\times 4 = 12\\) and $2^3 = 8$, ÷ then 9 ÷ 3 = 3 — 日本語 2 + 2 = <<2+2=4>>4 ✓ 10 / 4 = 2.",
        "",
        "=<<" * 30,
        # a 16-digit result being written: its "=" is MARK_TOKENS back at its last digits
        "So 99999999 * 99999999 = 9999999800000001, and 12345678 * 87654321 = 1082152022374638.",
        # a sum longer than the tail: how much of it the tail holds changes the result
        "Total: " + " + ".join(["1"] * 30) + " = 30, so " + "+".join(["2"] * 25) + "=50.",
    ]
    drafter = Arithmetic(qwen, draft_len=16)
    for text in texts:
        tokens = qwen.encode(text)
        every = list(range(len(tokens) + 1))
        each = [(known, drafter.propose(tokens, known)) for known in every]
        assert drafter.propose_at(tokens, every) == [(known, draft) for known, draft in each if draft is not None]
        assert drafter.propose_at(tokens, every[::3]) == [(k, d) for k, d in each[::3] if d is not None]
    assert any(drafter.propose_at(qwen.encode(text), list(range(60))) for text in texts)


GSM8K_STYLE = (
    "Ricardo can get 22 x 5 = <<22*5=110>>110 tomatoes.\nHe can get 4 x 8 = <<4*8=32>>32 eggplants.\n"
    "So he gets 110 + 32 = <<110+32=142>>142 fruits, and \\(142 - 42 = 100\\) are left.\n#### 100"
)


def test_the_candidates_stage_drafts_from_the_prefix_alone(tmp_path):
    """The arithmetic rows of the candidates table (--preset default): at every query position,
    exactly the draft Arithmetic proposes from the tokens before it (given only those), and a
    row wherever it proposes one; none under --preset seed."""
    import dataclasses

    from specdraft.config import RunConfig
    from specdraft.pipeline import RunInputs, run_until
    from specdraft.sources.synthetic import generate_traces
    from specdraft.warehouse.connection import Warehouse

    from .helpers import write_text_traces

    train = generate_traces(30, seed=5, eval_fraction=0.0, calibration_fraction=0.0)
    rows = [("train", p, r) for p, r in zip(train.column("problem").to_pylist(),
                                             train.column("raw_reasoning").to_pylist())]
    rows += [("calibration", "How many fruits?", GSM8K_STYLE), ("eval", "How many fruits?", GSM8K_STYLE),
             ("eval", "And now?", GSM8K_STYLE.replace("22 x 5", "21 x 5").replace("110", "105"))]
    data = write_text_traces(tmp_path / "in.parquet", rows)
    cfg = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0)
    for preset in ("default", "seed"):
        warehouse = tmp_path / preset
        run_until("candidates", dataclasses.replace(cfg, preset=preset), RunInputs(warehouse, str(data), name="calc"))
        with Warehouse(warehouse, read_only=True, dataset="calc") as wh:
            traces = {t: (p, tokens) for t, p, tokens in wh.run_text(
                "select trace_id, prompt_len, tokens from selected_traces").fetchall()}
            queried = wh.run_text("select trace_id, pos from query_positions order by all").fetchall()
            drafts = {(t, pos): list(draft) for t, pos, draft in wh.run_text(
                "select trace_id, pos, draft from candidates where family = 'arithmetic'").fetchall()}
        if preset == "seed":
            assert not drafts
            continue
        drafter = Arithmetic(load_tokenizer(cfg.tokenizer), cfg.draft_len)
        expected = {}
        for trace_id, pos in queried:
            draft = drafter.propose(traces[trace_id][1][:pos], pos)
            if draft is not None:
                expected[(trace_id, pos)] = list(draft)
        assert len(expected) >= 20 and drafts == expected
