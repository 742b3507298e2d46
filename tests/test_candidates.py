"""Candidates: causal (no future tokens: nor the policy's choices, nor the decode-step walk), real
(n-gram drafts are real train continuations), the label never a feature of the confidence model,
and the prompt-autocomplete lookup equal to the seed's table."""

from __future__ import annotations

import random
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest

from specdraft.config import RunConfig
from specdraft.drafters.autocomplete import SpanIndex, span_prefix_map
from specdraft.drafters.candidates import build_candidate_features
from specdraft.errors import SpecdraftError
from specdraft.pipeline import RunInputs, run_until
from specdraft.policy import confidence, evaluate, policy_for
from specdraft.sources.synthetic import generate_traces

from .conftest import FIXTURES
from .helpers import stored_compressions, write_text_traces

CFG = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0)
# with the online scenario's source too: drafts from eval traces served earlier
ONLINE = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0, online=True)
SEED = RunConfig(max_completion_tokens=400, max_index_positions=0, backoff_max_index_positions=0, preset="seed")


@contextmanager
def recorded_evaluations():
    """Keep each Evaluation stage 7 returns while the block runs: results.json has only the
    decode-step walk's histogram, the Evaluation its accepted length at every step."""
    kept = []
    originals = evaluate.evaluate, evaluate.evaluate_confidence

    def keeping(function):
        def wrapper(*args, **kwargs):
            kept.append(function(*args, **kwargs))
            return kept[-1]
        return wrapper

    evaluate.evaluate, evaluate.evaluate_confidence = map(keeping, originals)
    try:
        yield kept
    finally:
        evaluate.evaluate, evaluate.evaluate_confidence = originals


def choices(evaluation) -> list[tuple]:
    """(trace_id, pos, source, ctx_len, accepted, oracle_accepted) per eval position: the run's
    eval_positions rows."""
    table = evaluation.positions
    return list(zip(*(table.column(name).to_pylist()
                      for name in ("trace_id", "pos", "source", "ctx_len", "accepted", "oracle_accepted"))))


def decode_steps(evaluation, draft_len: int) -> dict[int, list[tuple[int, int]]]:
    """The decode-step walk per eval trace, as (pos, accepted) steps.

    Evaluation.decode_step holds the accepted lengths only, trace after trace; each step's position
    follows from the one before by the protocol (accepted + 1 further, draft_len after a full draft),
    and a trace's walk ends at its last response position."""
    table = evaluation.positions
    trace_ids = table.column("trace_id").to_pylist()
    lengths = Counter(trace_ids)
    starts = {}
    for trace_id, pos in zip(trace_ids, table.column("pos").to_pylist()):
        starts.setdefault(trace_id, pos)
    accepted = iter(evaluation.decode_step.tolist())
    walks = {}
    for trace_id in dict.fromkeys(trace_ids):
        cpos, walk = 0, []
        while cpos < lengths[trace_id]:
            step = next(accepted)
            walk.append((starts[trace_id] + cpos, step))
            cpos += step if step == draft_len else step + 1
        walks[trace_id] = walk
    assert next(accepted, None) is None  # every step belongs to a trace
    return walks


def shared_choices(rows, changed_at: int) -> list[tuple]:
    """What the text before `changed_at` (the first index where two versions of a trace differ)
    decides of the choices: those at positions that see only the shared prefix (pos <= changed_at),
    with accepted and oracle_accepted capped at the shared tokens a draft there can match."""
    return [(*row[:4], *(min(n, changed_at - row[1]) for n in row[4:])) for row in rows if row[1] <= changed_at]


def shared_walk(steps, changed_at: int) -> list[tuple[int, int]]:
    """The same for the decode-step walk: its steps at positions <= changed_at, accepted capped.
    A step whose draft reaches the changed text moves past changed_at in both versions."""
    return [(pos, min(accepted, changed_at - pos)) for pos, accepted in steps if pos <= changed_at]


def _train_rows(n=60):
    table = generate_traces(n, seed=3, eval_fraction=0.0, calibration_fraction=0.0)
    return [("train", p, r) for p, r in zip(table.column("problem").to_pylist(),
                                             table.column("raw_reasoning").to_pylist())]


FIRST_HALF = (
    "<think>\nGiven: A train leaves at 3 pm and travels 120 miles at 40 miles per hour.\nThe train leaves at 3 pm and travels 120 miles at 40 miles per hour, so it takes "
    "120 / 40 = 3 hours and arrives at 6 pm.\n"
)
PROBLEM = "A train leaves at 3 pm and travels 120 miles at 40 miles per hour. When does it arrive?"


def _candidates(tmp_path, second_half, cfg):
    rows = _train_rows() + [
        ("calibration", PROBLEM, FIRST_HALF + "So the answer is 6 pm."),
        ("calibration", PROBLEM, FIRST_HALF + "It arrives at 6 pm."),
        ("eval", PROBLEM, FIRST_HALF + "It arrives at six."),  # served before the one checked
        ("eval", PROBLEM, FIRST_HALF + second_half),
    ]
    data = write_text_traces(tmp_path / "in.parquet", rows)
    warehouse = tmp_path / "wh"
    with recorded_evaluations() as kept:
        run_until("evaluate", cfg, RunInputs(warehouse, str(data), name="leak"))
    from specdraft.warehouse.connection import Warehouse

    with Warehouse(warehouse, read_only=True, dataset="leak") as wh:
        trace_id, prompt_len, tokens = wh.run_text(
            "select trace_id, prompt_len, tokens from selected_traces where split = 'eval' "
            "order by trace_id desc limit 1").fetchall()[0]
        rows = wh.run_text(
            "select pos, family, source, draft from candidates where trace_id = ? order by pos, source", [trace_id]
        ).fetchall()
    (evaluation,) = kept
    return evaluation, trace_id, prompt_len, tokens, rows


@pytest.mark.parametrize("cfg", [ONLINE, SEED], ids=["default-online", "seed"])
def test_candidates_do_not_see_future_tokens(tmp_path, cfg):
    """The eval response repeats its first half; a drafter that sees the whole trace (as the seed's
    decode-step loop does) would copy the repeat. Changing the second half must not change any
    draft made before it, nor the policy's choice there, nor the decode-step walk over it.

    The policy is fitted on the calibration split, which is the same in both runs, so any change
    in a choice before the second half can only come from text after the position."""
    run_a, trace_id, prompt_len, tokens_a, rows_a = _candidates(tmp_path / "a", FIRST_HALF, cfg)
    run_b, _, _, tokens_b, rows_b = _candidates(tmp_path / "b", "Then it waits for an hour before going home.", cfg)
    common = next(i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y)
    assert common > prompt_len + 20
    before_a = [r for r in rows_a if r[0] <= common]
    before_b = [r for r in rows_b if r[0] <= common]
    assert before_a and before_a == before_b
    # every source of the preset, the seed's and (default) the ones beyond it, has drafts in the
    # compared stretch
    families = policy_for(cfg.preset).families
    assert {family for _, family, _, _ in before_a} == set(families)
    # and the repeat is found once it is known: copy drafts after the first half
    assert any(family == "copy" and pos > common for pos, family, _, _ in rows_a)

    # the choice at each position of the shared first half: the same source and context length
    # (accepted may differ only where the draft reaches past the first half)
    chosen_a, chosen_b = choices(run_a), choices(run_b)
    others_a = [row for row in chosen_a if row[0] != trace_id]
    assert others_a and others_a == [row for row in chosen_b if row[0] != trace_id]
    shared = shared_choices([row for row in chosen_a if row[0] == trace_id], common)
    assert len(shared) == common - prompt_len + 1
    assert shared == shared_choices([row for row in chosen_b if row[0] == trace_id], common)
    assert len({row[2] for row in shared}) >= 2  # the choice is not one source everywhere

    # the decode-step walk: the same steps over the first half, accepted capped at its end
    walks_a, walks_b = decode_steps(run_a, cfg.draft_len), decode_steps(run_b, cfg.draft_len)
    assert {t: w for t, w in walks_a.items() if t != trace_id} == {t: w for t, w in walks_b.items() if t != trace_id}
    walk = shared_walk(walks_a[trace_id], common)
    assert len(walk) >= 5 and walk == shared_walk(walks_b[trace_id], common)
    if cfg.preset != "seed":  # the default preset's walk reads the every-position choices
        accepted_at = {row[1]: row[4] for row in chosen_a if row[0] == trace_id}
        assert all(accepted == accepted_at[pos] for pos, accepted in walks_a[trace_id])


def test_the_label_is_not_a_feature(monkeypatch):
    assert "accepted" in confidence.LABELS
    assert not set(confidence.LABELS) & set(confidence.feature_columns())
    monkeypatch.setattr(confidence, "NUMERIC_FEATURES", (*confidence.NUMERIC_FEATURES, "accepted"))
    with pytest.raises(SpecdraftError, match="accepted is the label"):
        confidence.feature_columns()


def test_features_do_not_read_the_label(tmp_path):
    """Rewrite every draft's accepted length and rebuild candidate_features: the confidence model's
    input (so any model's predictions) stays the same, whatever the SQL derives a feature from."""
    from specdraft.warehouse.connection import Warehouse

    cfg = RunConfig(max_completion_tokens=160, max_index_positions=5000, backoff_max_index_positions=6000)
    run_until("candidates", cfg, RunInputs(tmp_path, str(FIXTURES / "parity_traces.parquet")))

    def model_input(wh):
        both = [confidence.calibration_features(wh), evaluate.eval_features(wh)]
        return [confidence.feature_matrix(t) for t in both], [t.column("accepted").to_pylist() for t in both]

    with Warehouse(tmp_path, dataset="parity_traces") as wh:
        inputs, labels = model_input(wh)
        wh.run_text("update candidates set accepted = ? - accepted", [cfg.draft_len])
        build_candidate_features(wh)
        scrambled_inputs, scrambled_labels = model_input(wh)
    assert labels != scrambled_labels
    for before, after in zip(inputs, scrambled_inputs):
        assert len(before) > 1000 and np.array_equal(before, after)


def test_the_known_token_features_count_only_the_text_before_the_position(tmp_path):
    """seen_tokens8, first_token_count and first_token_distance of every draft, recomputed in plain
    Python from its trace's tokens before its position: how many of the draft's first 8 tokens
    occur there, how often its first does, and how far back it last did (UNSEEN_DISTANCE where it
    does not, or the draft is empty)."""
    from specdraft.warehouse.connection import Warehouse

    cfg = RunConfig(max_completion_tokens=160, max_index_positions=5000, backoff_max_index_positions=6000)
    run_until("candidates", cfg, RunInputs(tmp_path, str(FIXTURES / "parity_traces.parquet")))
    with Warehouse(tmp_path, dataset="parity_traces") as wh:
        tokens = dict(wh.run_text("select trace_id, tokens from selected_traces").fetchall())
        rows = wh.run_text(
            "select f.trace_id, f.pos, c.draft, f.seen_tokens8, f.first_token_count, f.first_token_distance "
            "from candidate_features as f join candidates as c using (trace_id, pos, source)").fetchall()
    assert len(rows) > 10_000
    kinds = Counter()
    for trace_id, pos, draft, seen, count, distance in rows:
        known = tokens[trace_id][:pos]
        head = draft[:8]
        first = [at for at, token in enumerate(known) if head and token == head[0]]
        expected = (sum(token in known for token in head), len(first),
                    pos - first[-1] if first else confidence.UNSEEN_DISTANCE)
        assert (seen, count, distance) == expected, (trace_id, pos, draft)
        kinds[(0 < seen < len(head), min(count, 2))] += 1
    # drafts that use some of their tokens but not all, and first tokens unseen, seen once and more
    assert len(kinds) == 6, kinds


def test_candidates_store_their_drafts_uncompressed(tmp_path):
    """The drafts' tokens are stored as they are (candidates.CANDIDATES_COMPRESSION), which the
    candidates statement writes faster than DuckDB's bitpacking; the other columns as DuckDB chooses."""
    from specdraft.warehouse.connection import Warehouse

    cfg = RunConfig(max_completion_tokens=160, max_index_positions=5000, backoff_max_index_positions=6000)
    run_until("candidates", cfg, RunInputs(tmp_path, str(FIXTURES / "parity_traces.parquet")))
    with Warehouse(tmp_path, dataset="parity_traces") as wh:
        stored = stored_compressions(wh, "candidates")
    assert stored["draft"] <= {"Uncompressed", "Constant"} and "Uncompressed" in stored["draft"]
    assert stored["pos"] != {"Uncompressed"}


def test_ngram_drafts_are_real_train_continuations(tmp_path):
    rows = _train_rows(120)
    table = generate_traces(20, seed=11, eval_fraction=0.45, calibration_fraction=0.45)
    rows += list(zip(table.column("split").to_pylist(), table.column("problem").to_pylist(),
                     table.column("raw_reasoning").to_pylist()))
    data = write_text_traces(tmp_path / "in.parquet", rows)
    run_until("candidates", CFG, RunInputs(tmp_path / "wh", str(data), name="real"))
    from specdraft.warehouse.connection import Warehouse

    with Warehouse(tmp_path / "wh", read_only=True, dataset="real") as wh:
        tokens = dict(wh.run_text("select trace_id, tokens from selected_traces").fetchall())
        split = dict(wh.run_text("select trace_id, split from selected_traces").fetchall())
        # ordered, so the 300 checked below are the same drafts on every run
        ngram = wh.run_text("select trace_id, pos, ctx_len, draft from candidates where family = 'ngram' "
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


@pytest.mark.parametrize("picks", ["in memory, in turn", "looked up by joins"])
def test_the_backoff_walk_drafts_alike_beside_the_sql_in_turn_or_by_joins(tmp_path, picks, monkeypatch):
    """The candidates stage runs the backoff walk in a thread beside the n-gram choices where there
    is room for its picks twice (BackoffWalk.beside), else after the SQL sources on this thread,
    with its picks in memory or (where they do not fit at all) looked up by joins on the cursor.
    Every way gives the same candidates table."""
    import threading

    from specdraft.drafters.backoff_walk import BackoffWalk
    from specdraft.tables.backoff_picks import LengthPicks
    from specdraft.warehouse.connection import Warehouse

    walked_on, run = [], BackoffWalk.run
    monkeypatch.setattr(BackoffWalk, "run", lambda self: walked_on.append(threading.current_thread().name) or run(self))

    def candidates(where):
        walked_on.clear()
        run_until("candidates", CFG, RunInputs(where, str(FIXTURES / "parity_traces.parquet")))
        with Warehouse(where, dataset="parity_traces", read_only=True) as wh:
            return wh.run_text("select * exclude (family_order) from candidates order by all").fetchall()

    beside = candidates(tmp_path / "beside")
    assert [name.startswith("backoff-walk") for name in walked_on] == [True]
    fits = {"in memory, in turn": lambda wh, times=1: times == 1, "looked up by joins": lambda wh, times=1: False}
    monkeypatch.setattr(LengthPicks, "fit_beside", staticmethod(fits[picks]))
    other = candidates(tmp_path / "other")
    assert walked_on == ["MainThread"]
    assert len(beside) > 1000 and any(row[4] == "backoff" for row in beside)
    assert other == beside
