"""The drafter, live: bundles exported from real warehouses (the parity fixture, --preset seed and
--preset default, the real tokenizer), loaded and called as a decoder would; their drafts are the
warehouse's. Tests taking `built` or `drafter` run for both presets."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft import Drafter
from specdraft.cli import main
from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.live import drafter as live_drafter
from specdraft.live import replay as live_replay
from specdraft.live.bundle import export_bundle
from specdraft.live.confidence import Candidate
from specdraft.live.replay import every_position, replay
from specdraft.pipeline import run_all
from specdraft.warehouse.connection import Warehouse

from .test_parity import FIXTURE, SEED

DATASET = "parity_traces"


DEFAULT = dataclasses.replace(SEED, preset="default")


def _built(tmp_path_factory, cfg, name: str | None = None):
    """A run of the parity fixture, and its bundle."""
    root = tmp_path_factory.mktemp(f"live-{name or cfg.preset}")
    results = run_all(cfg, root / "warehouse", str(FIXTURE), "unused")
    export_bundle(root / "warehouse", None, root / "bundle")
    return root, results


@pytest.fixture(scope="module")
def seed_built(tmp_path_factory):
    return _built(tmp_path_factory, SEED)


@pytest.fixture(scope="module")
def default_built(tmp_path_factory):
    return _built(tmp_path_factory, DEFAULT)


@pytest.fixture(scope="module")
def chain_built(tmp_path_factory):
    """A --preset default --chain-model run: every calibration position below 512, and the chain
    model scoring the n-gram and backoff drafts in the first choice."""
    return _built(tmp_path_factory, dataclasses.replace(DEFAULT, chain_model=True), "chain")


@pytest.fixture(scope="module")
def rank2_built(tmp_path_factory):
    """A --preset default run as runs before 2026-12-06 made it, proposing ngram-rank2 drafts too
    (which its features count), and its bundle, which therefore drafts them."""
    from specdraft.policy.confidence import ConfidencePolicy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConfidencePolicy, "families", families.NAMES)
        return _built(tmp_path_factory, DEFAULT, "rank2")


@pytest.fixture(scope="module", params=["seed", "default"])
def built(request):
    return request.getfixturevalue(f"{request.param}_built")


@pytest.fixture(scope="module")
def drafter(built):
    return Drafter.load(built[0] / "bundle")


@pytest.fixture(scope="module")
def seed_drafter(seed_built):
    return Drafter.load(seed_built[0] / "bundle")


@pytest.fixture(scope="module")
def default_drafter(default_built):
    return Drafter.load(default_built[0] / "bundle")


def _eval_traces(root):
    """(trace_id, prompt_len, tokens) of each eval trace."""
    with Warehouse(root / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
        table = wh.query("live/replay_traces").to_arrow_table()
    return list(zip(*(table.column(c).to_pylist() for c in ("trace_id", "prompt_len", "tokens"))))


@pytest.fixture(scope="module")
def eval_traces(built):
    return _eval_traces(built[0])


@pytest.fixture(scope="module")
def seed_eval_traces(seed_built):
    return _eval_traces(seed_built[0])


@pytest.fixture(scope="module")
def candidate_drafts(seed_built):
    """(trace_id, pos) -> every distinct draft the warehouse's sources made at an eval position."""
    with Warehouse(seed_built[0] / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
        rows = wh.run_text("select trace_id, pos, draft from candidates where split = 'eval'").fetchall()
    out: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    for trace_id, pos, draft in rows:
        out.setdefault((trace_id, pos), set()).add(tuple(draft))
    return out


def walk(drafter, prompt_len, tokens, upto=None):
    """The draft at every response position (up to `upto`), extending one true token at a time."""
    session = drafter.start(tokens[:prompt_len])
    drafts = []
    for pos in range(prompt_len, len(tokens) if upto is None else upto + 1):
        drafts.append(session.propose())
        if pos < len(tokens):
            session.extend([tokens[pos]])
    session.close()
    return drafts


# -- the warehouse's drafts -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["seed", "default", "rank2", "chain"])
def test_live_drafts_are_the_runs_chosen_drafts(name, request):
    root, results = request.getfixturevalue(f"{name}_built")
    result = replay(root / "warehouse", None, root / "bundle")
    assert result["positions"] == results["selected"]["positions"] > 1000
    assert result["exact_positions"] == result["positions"], result["mismatches"]
    assert result["every_position"]["equal"] and result["every_position"]["live"] == results["selected"]["avg_accepted"]
    assert result["decode_step"]["equal"] and result["decode_step"]["live"] == results["decode_step"]["avg_accepted"]


def test_propose_many_gives_every_sources_draft(seed_drafter, seed_eval_traces, candidate_drafts):
    """All four sources at once: at each eval position, the distinct drafts of propose_many(4) are
    those of the warehouse's candidates there, the first is propose()'s."""
    drafter = seed_drafter
    checked = 0
    for trace_id, prompt_len, tokens in seed_eval_traces:
        session = drafter.start(tokens[:prompt_len])
        for pos in range(prompt_len, len(tokens)):
            many = session.propose_many(4)
            assert {tuple(d) for d in many} == candidate_drafts.get((trace_id, pos), set()), (trace_id, pos)
            assert len(many) == len({tuple(d) for d in many})
            assert session.propose() == (many[0] if many else [])
            assert session.propose_many(1) == many[:1]
            checked += len(many)
            session.extend([tokens[pos]])
    assert checked > 1000


def test_a_long_prompts_frozen_copy_index_drafts_the_same(drafter, eval_traces, monkeypatch):
    """Past DICT_LIMIT the prompt's copy index is sorted arrays, not dicts: the same drafts."""
    expected = [walk(drafter, p, t) for _, p, t in eval_traces[:4]]
    monkeypatch.setattr(live_drafter, "DICT_LIMIT", 0)
    session = drafter.start(eval_traces[0][2][: eval_traces[0][1]])
    assert session._frozen is not None
    assert (session._recent is None) == (drafter.choices is None)
    assert session._recent is None or session._recent.frozen is not None
    assert [walk(drafter, p, t) for _, p, t in eval_traces[:4]] == expected


def test_each_source_drafts_and_scores_as_the_warehouse(seed_built, seed_drafter, seed_eval_traces):
    """Source by source, at every eval position: the same source name, draft and raw score as the
    candidates table (the n-gram's with log1p(count) added, as policy/evaluate.py adds it), and
    the same backoff steps, so the same exact backoff score."""
    drafter, eval_traces = seed_drafter, seed_eval_traces
    with Warehouse(seed_built[0] / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
        rows = wh.run_text(
            "select c.trace_id, c.pos, c.family_order, c.source, c.draft, c.score, c.count, b.step_ctx_lens, "
            "b.step_counts, b.step_totals from candidates as c left join backoff_candidates as b "
            "on c.family = 'backoff' and b.trace_id = c.trace_id and b.pos = c.pos "
            "where c.split = 'eval' order by c.trace_id, c.pos, c.family_order").fetchall()
    expected: dict[tuple[int, int], list[tuple]] = {}
    for trace_id, pos, order, source, draft, score, count, lens, counts, totals in rows:
        raw = score + math.log1p(count) if source.startswith("ngram:") else score
        steps = list(zip(lens, counts, totals)) if lens is not None else None
        expected.setdefault((trace_id, pos), []).append((order, source, raw, list(draft), steps))
    families = set()
    for trace_id, prompt_len, tokens in eval_traces:
        session = drafter.start(tokens[:prompt_len])
        for pos in range(prompt_len, len(tokens)):
            live = [(c.order, c.source, c.raw, list(c.draft), c.steps) for c in session._candidates()]
            want = expected.get((trace_id, pos), [])
            assert [c[:2] + c[3:] for c in live] == [c[:2] + c[3:] for c in want], (trace_id, pos)
            for (order, _, raw, _, _), (_, _, raw_sql, _, _) in zip(live, want):
                # backoff: the float score up to summation order (the exact one decides near ties)
                assert raw == raw_sql if order != live_drafter.BACKOFF else math.isclose(raw, raw_sql, rel_tol=1e-14)
                families.add(order)
            session.extend([tokens[pos]])
    assert families == {0, 1, 2, 3}


def brute_force_copy(tokens: list[int], lengths, draft_len: int):
    """The copy source by its definition: the longest length whose last tokens occur earlier, at the
    latest place with draft_len known tokens after it."""
    n = len(tokens)
    for length in sorted(lengths, reverse=True):
        if length > n:
            continue
        for at in range(n - draft_len, length - 1, -1):
            if tokens[at - length : at] == tokens[n - length :]:
                return f"copy:{length}", tokens[at : at + draft_len]
    return None


@pytest.mark.parametrize("dict_limit", [live_drafter.DICT_LIMIT, 0])
def test_copy_finds_the_latest_longest_match(seed_drafter, seed_eval_traces, monkeypatch, dict_limit):
    """Prompts that repeat themselves (with changes), so matches of every copy length occur many
    times in the prompt and in the response: the latest, longest one is drafted, whether the
    prompt's index is dicts or frozen sorted arrays."""
    monkeypatch.setattr(live_drafter, "DICT_LIMIT", dict_limit)
    drafter = seed_drafter
    rng = random.Random(5)
    lengths = drafter.config.copy_context_lengths
    for _, prompt_len, tokens in seed_eval_traces[:3]:
        piece = tokens[:200]
        text = []
        for _ in range(4):
            text += [t if rng.random() > 0.02 else rng.choice(piece) for t in piece]
        prompt, response = text[:600], text[600:] + tokens[200:260]
        session = drafter.start(prompt)
        assert (session._frozen is not None) == (dict_limit == 0)
        for token in response:
            found = session._copy_candidate()
            assert (found and (found.source, found.draft)) == (
                brute_force_copy(session.tokens, lengths, drafter.draft_len) or None)
            session.extend([token])


def _rounded_walks(n: int) -> list[list[tuple[int, int, int]]]:
    """Backoff steps (ctx_len, count, total) whose float score is not the exact one (1 in 25)."""
    from specdraft.drafters.backoff_walk import backoff_score

    rng, found = random.Random(3), []
    while len(found) < n:
        steps = [(rng.choice([4, 8]), rng.randint(1, t), t) for t in (rng.randint(1, 9) for _ in range(rng.randint(2, 16)))]
        if live_drafter.backoff_raw(steps) * 0.0001 != backoff_score(*map(list, zip(*steps))) * 0.0001:
            found.append(steps)
    return found


ROUNDED_WALKS = _rounded_walks(50)


# The same examples on every run (derandomize, as in test_properties.py), so CI is not flaky.
@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data())
def test_the_choice_is_the_batch_evaluations(data):
    """The live policy against policy/evaluate.py's, on candidate sets made to tie: source averages
    that coincide or are 0 (then raw scores decide, to the last bit), raw scores equal to the
    backoff's exact score or one float away, the backoff's float score from the batch walk's own
    code (backoff_walk._as_table)."""
    import numpy as np
    import pyarrow as pa

    from specdraft.drafters.backoff_walk import _as_table, backoff_score
    from specdraft.policy import evaluate
    from specdraft.policy.runs import best_in_runs
    from specdraft.policy.seed import SourceAveragePolicy

    averages = st.sampled_from([0.0, 0.0, 1 / 3, 2.25])
    names = ["copy:4", "prompt-autocomplete", "backoff:4", "backoff:8", "ngram:4"]
    policy = SourceAveragePolicy(data.draw(averages), {n: data.draw(averages) for n in names if data.draw(st.booleans())}, {})
    steps = data.draw(st.sampled_from(ROUNDED_WALKS)) if data.draw(st.booleans()) else []
    for _ in range(0 if steps else data.draw(st.integers(1, 16))):
        total = data.draw(st.integers(1, 9))
        steps.append((data.draw(st.sampled_from([4, 8])), data.draw(st.integers(1, total)), total))
    exact = backoff_score(*map(list, zip(*steps)))
    near = st.sampled_from([exact, math.nextafter(exact, math.inf), math.nextafter(exact, -math.inf), 36.5, exact + 1e-9])
    families = [f for f in ("copy", "prompt-autocomplete", "backoff", "ngram") if data.draw(st.booleans())]
    if not families:
        return
    sources = {"copy": "copy:4", "prompt-autocomplete": "prompt-autocomplete", "ngram": "ngram:4",
               "backoff": f"backoff:{steps[0][0]}"}
    raws = {family: data.draw(near) for family in families if family != "backoff"}
    # the batch side: candidates rows as eval_candidates gives them, the backoff row's score made by
    # the batch walk, its steps where _resolve_near_ties asks for them
    n, width = len(steps), 16
    matrix = lambda values: np.array([list(values) + [0] * (width - n)], dtype=np.int64)
    walk = _as_table(np.array([0]), np.array([0]), matrix([1] * n), matrix(s[0] for s in steps),
                     matrix(s[1] for s in steps), np.array([[*(s[2] for s in steps)] + [1] * (width - n)]),
                     np.array([n]))
    raws["backoff"] = walk.column("score")[0].as_py()
    cand = pa.table({
        "trace_id": [0] * len(families), "pos": [0] * len(families), "family": families,
        "source": [sources[f] for f in families], "score": [raws[f] for f in families],
        "count": pa.array([0 if f == "ngram" else None for f in families], pa.int64()),
    })

    class Steps:  # the warehouse side of _resolve_near_ties
        def register(self, name, table):
            pass

        def query(self, name):
            rows = [(0, 0, [s[0] for s in steps], [s[1] for s in steps], [s[2] for s in steps])]
            return type("Result", (), {"fetchall": lambda self: rows})()

    starts = np.array([0])
    scores, raw = evaluate.candidate_policy_scores(cand, policy)
    scores = evaluate._resolve_near_ties(Steps(), cand, scores, raw, starts, policy)
    batch = families[int(best_in_runs(scores, starts)[0])]
    order = {f: i for i, f in enumerate(("copy", "prompt-autocomplete", "backoff", "ngram"))}
    live = [Candidate(order[f], 0, 0, 0, [order[f]], sources[f],
                      live_drafter.backoff_raw(steps) if f == "backoff" else raws[f],
                      steps if f == "backoff" else None) for f in families]
    assert families[live_drafter.first_best(live_drafter.policy_scores(live, policy))] == batch


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ids", [(1, 2), "12", b"\x01", None, 5, iter([1, 2])])
def test_a_non_list_is_a_value_error(drafter, ids):
    with pytest.raises(ValueError, match="must be a list of token ids"):
        drafter.start(ids)
    session = drafter.start([1, 2])
    with pytest.raises(ValueError, match="must be a list of token ids"):
        session.extend(ids)


@pytest.mark.parametrize("bad", [-1, "vocab", 2.0, True, "7", None])
def test_a_token_outside_the_vocabulary_is_a_value_error(drafter, bad):
    bad = drafter.vocab_size if bad == "vocab" else bad
    with pytest.raises(ValueError, match=r"prompt_ids\[1\] is .*token ids are ints from 0 to 151850"):
        drafter.start([15, bad])
    session = drafter.start([15])
    with pytest.raises(ValueError, match=r"token_ids\[0\] is "):
        session.extend([bad, 16])
    assert session.tokens == [15]  # nothing of a rejected call was added


def test_an_empty_prompt_works(drafter, eval_traces):
    """A session with no prompt proposes nothing until text is written; then the text is all
    response (its positions count from 0, a feature of --preset default's model, and prompt
    autocomplete has no prompt), and it drafts as a session given the same text a token at a time
    does. (It need not draft as a session given that text as its prompt: with the Tweedie loss the
    tests' fixture's default bundle does not.)"""
    session = drafter.start([])
    assert session.propose() == [] and session.propose_many(3) == []
    _, prompt_len, tokens = eval_traces[0]
    session.extend(tokens[:prompt_len])
    by_token = drafter.start([])
    for token in tokens[:prompt_len]:
        by_token.extend([token])
    draft = session.propose()
    assert 0 < len(draft) <= drafter.draft_len and draft == by_token.propose()
    assert session.propose_many(3) == by_token.propose_many(3)
    session.close()
    with pytest.raises(ValueError, match="closed"):
        session.propose()
    with pytest.raises(ValueError, match="positive"):
        drafter.start([]).propose_many(0)


# -- threads and causality ------------------------------------------------------------------------

def test_eight_threads_draft_as_one(drafter, eval_traces):
    traces = eval_traces[:8]
    serial = [walk(drafter, p, t) for _, p, t in traces]
    parallel: list = [None] * len(traces)
    barrier = threading.Barrier(len(traces))

    def run(i):
        barrier.wait()
        parallel[i] = walk(drafter, traces[i][1], traces[i][2])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(traces))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert parallel == serial


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_drafts_at_p_do_not_depend_on_what_follows_or_how_it_arrived(drafter, eval_traces, data):
    """Two sessions share a trace's first p tokens, then go on differently; one reached p a token
    at a time, proposing at each, the other in random chunks, proposing now and then. Their drafts
    at p are the same, and the first's drafts up to p do not change with what it is extended by
    after p."""
    _, prompt_len, tokens = data.draw(st.sampled_from(eval_traces))
    vocabulary = sorted(set(tokens))
    # the trace with some tokens replaced by others of its own (contexts still repeat and hit)
    tokens = [data.draw(st.sampled_from(vocabulary)) if data.draw(st.integers(0, 9)) == 0 else t
              for t in tokens[: prompt_len + 80]]
    p = data.draw(st.integers(prompt_len, len(tokens)))
    future = data.draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=30))
    one_by_one = walk(drafter, prompt_len, tokens[:p] + future, upto=p)
    assert walk(drafter, prompt_len, tokens[:p] + future[::-1], upto=p) == one_by_one
    session = drafter.start(tokens[:prompt_len])
    at = prompt_len
    while at < p:
        step = data.draw(st.integers(1, max(1, p - at)))
        session.extend(tokens[at : at + step])
        at += step
        if data.draw(st.booleans()):
            assert session.propose() == one_by_one[at - prompt_len]
    assert session.propose() == one_by_one[p - prompt_len]


# -- the bundle -----------------------------------------------------------------------------------

@pytest.fixture
def bundle_copy(built, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(built[0] / "bundle", copy)
    return copy


def _one_line_naming(excinfo, path: Path, words: str):
    """One line: the file's path, then what is wrong with it."""
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    assert re.search(words, message[len(str(path)) + 2 :]), message


@pytest.mark.parametrize("name", ["ngram.arrow", "backoff.arrow", "store.arrow", "policy.json", "config.json"])
def test_a_truncated_file_is_named(bundle_copy, name):
    path = bundle_copy / name
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, path, "truncated")


@pytest.mark.parametrize("name", ["ngram.arrow", "backoff.arrow", "store.arrow", "policy.json"])
def test_a_corrupted_file_is_named(bundle_copy, name):
    path = bundle_copy / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, path, "checksum")


def _first_segment_shortened(manifest):
    (ctx_len, start, stop), *rest = manifest["tables"]["ngram.arrow"]["segments"]
    manifest["tables"]["ngram.arrow"]["segments"] = [[ctx_len, start, stop - 1], *rest]


@pytest.mark.parametrize("change, match", [
    (lambda m: m.update(format_version=5), "format version 5; this specdraft reads versions 1, 2, 3, 4"),
    (lambda m: m["tokenizer"].update(fingerprint="0123456789abcdef"), "made with tokenizer"),
    (lambda m: m["tokenizer"].update(name="Qwen/Qwen2.5-Math-1.5B", vocab_size=5), "made with tokenizer"),
    (lambda m: m.update(format="something else"), "not a specdraft drafter bundle"),
    (lambda m: m.pop("files"), "incomplete manifest"),
    # the tables' segments are not under a checksum: wrong ones found other rows and drafted other
    # tokens without an error, or failed with a KeyError or an unpacking error
    (lambda m: _first_segment_shortened(m), r"tables\['ngram.arrow'\]: segment .* does not follow on"),
    (lambda m: m["tables"]["ngram.arrow"].update(segments=[]), r"the segments end at row 0 of"),
    (lambda m: m["tables"]["ngram.arrow"].update(segments=[[1, 2]]), r"is not \[ctx_len, start, stop\]"),
    (lambda m: m["tables"].pop("backoff.arrow"), r"tables\['backoff.arrow'\] does not describe the table"),
    (lambda m: m.pop("run_id"), "incomplete manifest"),
    # wrong types said that the values agreed ("274626 bytes, the manifest says 274626")
    (lambda m: m.update(format_version="2"), "format version '2'; this specdraft reads versions 1, 2, 3, 4"),
    (lambda m: m["files"]["store.arrow"].update(bytes=str(m["files"]["store.arrow"]["bytes"])),
     r"files\['store.arrow'\] of the wrong type"),
    (lambda m: m["tokenizer"].update(vocab_size=str(m["tokenizer"]["vocab_size"])), "tokenizer.vocab_size of the wrong type"),
    # a file outside the bundle was opened and hashed as its own
    (lambda m: m["files"].update({"../outside.arrow": m["files"]["store.arrow"]}), "'../outside.arrow', not a path inside"),
    (lambda m: m["files"].update({"/etc/hosts": m["files"]["store.arrow"]}), "'/etc/hosts', not a path inside"),
    (lambda m: m["tokenizer"].update(bundled="../tokenizer"), "'../tokenizer', not a path inside"),
])
def test_a_wrong_manifest_is_named(bundle_copy, change, match):
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    change(manifest)
    (bundle_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, bundle_copy / "manifest.json", match)


def test_a_config_that_is_not_an_object_is_named(bundle_copy):
    """With its checksum made to match, a config.json holding a list failed with a TypeError."""
    import hashlib

    config = bundle_copy / "config.json"
    config.write_text("[1, 2]")
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    manifest["files"]["config.json"] = {"bytes": config.stat().st_size,
                                        "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}
    (bundle_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, config, "not a run's settings")


def _rewritten(bundle_copy, name: str, change) -> Path:
    """bundle_copy with one JSON file changed, and its checksum in the manifest made to match."""
    import hashlib

    path = bundle_copy / name
    data = json.loads(path.read_text())
    changed = change(data)
    path.write_text(json.dumps(data if changed is None else changed))
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (bundle_copy / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.mark.parametrize("change, match", [
    # a setting this specdraft does not know (a newer one's bundle) failed with a TypeError traceback
    (lambda c: c.update(bogus=1), r"not a run's settings \(.*bogus.*newer specdraft"),
    (lambda c: c.update(draft_len="x"), "not a run's settings"),
    # these loaded and drafted other tokens than the run measured, without an error
    (lambda c: c.update(draft_len=4), r"draft_len 4, but the manifest says 16"),
    (lambda c: c.update(preset="seed"), r"preset 'seed', but the manifest says 'default'"),
    (lambda c: {}, r"preset None, but the manifest says 'default'"),
])
def test_an_edited_config_is_named(default_built, tmp_path, change, match):
    bundle_copy = tmp_path / "bundle"
    shutil.copytree(default_built[0] / "bundle", bundle_copy)
    path = _rewritten(bundle_copy, "config.json", change)
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, path, match)


def test_a_policy_choosing_an_unknown_family_is_named(default_built, tmp_path):
    """It failed with a KeyError traceback from the drafter's family lookup."""
    bundle_copy = tmp_path / "bundle"
    shutil.copytree(default_built[0] / "bundle", bundle_copy)
    path = _rewritten(bundle_copy, "policy.json", lambda p: p.update(choices=[*p["choices"], "nosuch"]))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, path, "draft families 'nosuch' are not this specdraft's")


def test_a_missing_file_or_manifest_is_named(bundle_copy):
    (bundle_copy / "store.arrow").unlink()
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, bundle_copy / "store.arrow", "missing")
    (bundle_copy / "manifest.json").write_text("{not json")
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(bundle_copy)
    _one_line_naming(excinfo, bundle_copy / "manifest.json", "unreadable")
    (bundle_copy / "manifest.json").unlink()
    with pytest.raises(SpecdraftError, match="not a drafter bundle"):
        Drafter.load(bundle_copy)


def test_rank2_goes_with_the_policy_that_proposed_it(default_built, rank2_built, tmp_path):
    """A default-preset bundle holds ngram_rank2.arrow exactly where its run proposed ngram-rank2
    drafts (policy.json's families; a run that recorded none proposed every family), and one whose
    policy drafts from it but lists no such table is refused by name, as is a policy whose
    families are not a list of names."""
    manifests = {name: json.loads((built[0] / "bundle" / "manifest.json").read_text())
                 for name, built in (("default", default_built), ("rank2", rank2_built))}
    assert "ngram_rank2.arrow" not in manifests["default"]["files"]
    assert "ngram_rank2.arrow" in manifests["rank2"]["files"]
    # as a run from before the record: it proposed every family
    before = _with_policy(default_built[0] / "bundle", tmp_path / "before", lambda policy: policy.pop("families"))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(before)
    _one_line_naming(excinfo, before / "manifest.json", "lists no ngram_rank2.arrow")
    broken = _with_policy(default_built[0] / "bundle", tmp_path / "broken", lambda policy: policy.update(families=5))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(broken)
    _one_line_naming(excinfo, broken / "policy.json", "not a default policy")


def test_the_chain_model_chooses_first_and_travels_in_the_bundle(default_built, chain_built, tmp_path):
    """--chain-model: the run fits the chain model on every calibration position below 512 and
    its first choices differ from the model's own at some positions (where the choice after a
    chained token, eval_positions' second_source, is the model's); the bundle carries its trees,
    and one whose policy scores with them but lists no chain_trees.arrow is refused by name. A
    run without it records the position's own choice as the second one, and no chain trees."""
    (root, results), (plain_root, plain_results) = chain_built, default_built
    assert RunConfig.recorded(results["config"]).calibration_sample == (1, 512)
    assert RunConfig.recorded(plain_results["config"]).calibration_sample == (2, 256)
    # a run before the flag named the seed's sample: the same tables' settings as leaving it out
    named = RunConfig.recorded({**plain_results["config"], "calibration_stride": 2, "calibration_max_positions": 256})
    settings = ("calibration_stride", "calibration_max_positions", "preset")
    assert named.fingerprint(*settings) == RunConfig.recorded(plain_results["config"]).fingerprint(*settings)
    assert RunConfig.recorded(results["config"]).fingerprint(*settings) != named.fingerprint(*settings)
    with pytest.raises(SpecdraftError, match="leaves it no next position"):
        dataclasses.replace(DEFAULT, chain_model=True, calibration_stride=2)
    assert results["policy"]["chain_model"] and results["policy"]["chain_drafts"] > 0
    assert not plain_results["policy"]["chain_model"] and plain_results["policy"]["chain_drafts"] == 0
    # the first model is fitted on the same calibration drafts, every second position
    assert results["policy"]["calibration_drafts"] == plain_results["policy"]["calibration_drafts"]
    for where, chained in ((root, True), (plain_root, False)):
        with Warehouse(where / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
            differ = wh.run_text("select count(*) from eval_positions where source is distinct from second_source"
                                 ).fetchall()[0][0]
            trees = wh.run_text("select count(*) from policy_chain_trees").fetchall()[0][0] if wh.has_table(
                "policy_chain_trees") else 0
        assert (differ > 0) == chained, differ
        assert (trees > 0) == chained
    manifest = json.loads((root / "bundle" / "manifest.json").read_text())
    assert manifest["format_version"] == 4 and "chain_trees.arrow" in manifest["files"]
    plain_manifest = json.loads((plain_root / "bundle" / "manifest.json").read_text())
    assert plain_manifest["format_version"] == 3 and "chain_trees.arrow" not in plain_manifest["files"]
    # and its config.json names no setting a reader of version 3 would not know
    plain_config = json.loads((plain_root / "bundle" / "config.json").read_text())
    assert not {"chain_model", "calibration_stride", "calibration_max_positions"} & set(plain_config)
    assert json.loads((root / "bundle" / "config.json").read_text())["chain_model"] is True
    assert Drafter.load(root / "bundle").policy.chain_trees is not None
    without = _with_policy(plain_root / "bundle", tmp_path / "without",
                           lambda policy: policy.update(chain_model=True, chain_baseline=0.0))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(without)
    _one_line_naming(excinfo, without / "manifest.json", "lists no chain_trees.arrow")


def test_a_chain_model_run_without_chain_trees_is_not_a_version_3_bundle(tmp_path_factory, monkeypatch):
    """A --chain-model run whose chain fit had nothing to learn (every label 0 here) bundles no
    chain trees, but its config.json names chain_model, which a reader of version 3 refuses as an
    unknown setting: the bundle is version 4, and this specdraft drafts from it."""
    import numpy as np

    from specdraft.policy import confidence

    def nothing_to_learn(drafts, predicted, chain, draft_len, exclude_families=()):
        return np.ones(drafts.num_rows, dtype=bool), np.zeros(drafts.num_rows)

    monkeypatch.setattr(confidence, "chain_labels", nothing_to_learn)
    root, results = _built(tmp_path_factory, dataclasses.replace(DEFAULT, chain_model=True), "unlearned")
    assert not results["policy"]["chain_model"]
    manifest = json.loads((root / "bundle" / "manifest.json").read_text())
    assert "chain_trees.arrow" not in manifest["files"]
    assert json.loads((root / "bundle" / "config.json").read_text())["chain_model"] is True
    assert manifest["format_version"] == 4
    assert Drafter.load(root / "bundle").policy.chain_trees is None


def test_export_is_atomic_and_reproducible(built, tmp_path, monkeypatch):
    root, _ = built
    out = tmp_path / "bundle"
    first = export_bundle(root / "warehouse", None, out)
    assert first["files"] == json.loads((root / "bundle" / "manifest.json").read_text())["files"]
    from specdraft import files

    def fail(point):
        if point == "write:bundle:before_rename":
            raise RuntimeError("killed")

    monkeypatch.setattr(files, "reach", fail)
    shutil.rmtree(out)
    with pytest.raises(RuntimeError):
        export_bundle(root / "warehouse", None, out)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(SpecdraftError, match="not a drafter bundle"):
        export_bundle(root / "warehouse", None, tmp_path / "mine")


def test_online_replay_is_the_online_runs(tmp_path_factory, default_built):
    """An --online run's bundle loads with its online store on: every eval session, closed in
    trace order, joins the store later ones draft from, as online_candidates.sql served them; the
    replay's drafts are the run's at every position, and its decode-step figure is the run's. The
    offline bundle refuses online=True."""
    root, results = _built(tmp_path_factory, dataclasses.replace(DEFAULT, online=True))
    assert results["scenario"] == "online" and results["per_source"]["online"]["positions"] > 0
    result = replay(root / "warehouse", None, root / "bundle")
    assert result["exact_positions"] == result["positions"] == results["selected"]["positions"], result["mismatches"]
    assert result["every_position"]["equal"] and result["decode_step"]["equal"]
    drafter = Drafter.load(root / "bundle")
    assert drafter.online and not Drafter.load(root / "bundle", online=False).online
    with pytest.raises(SpecdraftError, match="online=True needs the bundle of an --online run"):
        Drafter.load(default_built[0] / "bundle", online=True)


def test_a_run_whose_tables_were_rebuilt_is_refused(built, tmp_path):
    """The warehouse keeps one build's tables: a run recorded before runs kept their build keys,
    for other settings (here a run claiming --draft-len 8), no longer has its tables there, and
    its bundle would be another's."""
    from specdraft.report.results import record_run

    root, results = built
    other = tmp_path / "warehouse"
    shutil.copytree(root / "warehouse", other)
    with Warehouse(other, dataset=DATASET) as wh:
        record_run(wh, {**results, "config": {**results["config"], "draft_len": 8}}, run_id="older-run")
    with pytest.raises(SpecdraftError, match="rebuilt since .*ngram_tables, candidates"):
        export_bundle(other, "older-run", tmp_path / "bundle")


@pytest.mark.parametrize("name", ["default", "chain"])
def test_the_browser_scores_drafts_as_the_first_choice_does(name, request):
    """The trace browser's score of each draft is what the run's first choice compared (each
    distinct draft scored once, from its scorer's features; with the chain model, by it for the
    n-gram and backoff drafts): the chosen draft's is the highest at every position shown, to the
    4 decimals shown."""
    from collections import defaultdict

    import pyarrow as pa

    from specdraft.report.trace_browser import _scored_drafts

    root, results = request.getfixturevalue(f"{name}_built")
    with Warehouse(root / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
        traces = wh.run_text("select distinct trace_id from eval_positions").fetchall()
        wh.register("browser_traces", pa.table({"trace_id": pa.array([t for t, in traces], pa.int64())}))
        drafts = _scored_drafts(wh, results)
        chosen = {(t, p): s for t, p, s in wh.run_text(
            "select trace_id, pos, source from eval_positions where source is not null").fetchall()}
    best, score_of = defaultdict(lambda: -math.inf), {}
    for trace_id, pos, source, _accepted, score, _text in drafts:
        if score is not None:
            best[trace_id, pos] = max(best[trace_id, pos], score)
            score_of[trace_id, pos, source] = score
    shown = [(key, source) for key, source in chosen.items() if (*key, source) in score_of]
    assert len(shown) > 1000
    wrong = [(key, source, score_of[(*key, source)], best[key]) for key, source in shown
             if score_of[(*key, source)] != best[key]]
    assert not wrong, (len(wrong), len(shown), wrong[:5])


def test_a_warehouse_from_before_second_choices_replays_and_takes_them(chain_built, tmp_path):
    """eval_positions from before the chain model has no second_source: its runs replay with the
    position's own choice as the one after a chained token (here a --chain-model run's own table
    without the column: its chained drafts then differ where the two choices do, and nowhere
    else), and the next run recorded adds the column, null in the older rows."""
    from specdraft.report.results import record_run

    root, results = chain_built
    older = tmp_path / "warehouse"
    shutil.copytree(root / "warehouse", older)
    with Warehouse(older, dataset=DATASET) as wh:
        positions = wh.run_text("select * exclude (run_id) from eval_positions").to_arrow_table()
        differ = wh.run_text("select count(*) from eval_positions where source is distinct from second_source "
                             "and source similar to '(ngram-all|backoff):.*'").fetchall()[0][0]
        wh.run_text("alter table eval_positions drop column second_source")
    figures = replay(older, None, root / "bundle")
    assert 0 < figures["positions"] - figures["exact_positions"] <= differ
    with Warehouse(older, dataset=DATASET) as wh:
        record_run(wh, dict(results), run_id="newer-run", positions=positions)
        nulls = wh.run_text("select run_id, count(second_source) from eval_positions group by run_id").fetchall()
    assert dict(nulls) == {results["run_id"]: 0, "newer-run": positions.num_rows - positions.column(
        "second_source").null_count}


def _traces_with_other_responses(source: Path, target: Path) -> None:
    """The fixture's traces with each split's responses rotated by one row: other data, the
    same splits, problems and trace counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    splits, reasoning = table.column("split").to_pylist(), table.column("raw_reasoning").to_pylist()
    rotated = list(reasoning)
    for split in set(splits):
        rows = [i for i, name in enumerate(splits) if name == split]
        for row, taken in zip(rows, rows[1:] + rows[:1]):
            rotated[row] = reasoning[taken]
    pq.write_table(table.set_column(table.schema.get_field_index("raw_reasoning"), "raw_reasoning",
                                    pa.array(rotated, pa.string())), target)


def test_a_run_whose_data_changed_under_it_is_refused(tmp_path):
    """The input file is rewritten with other responses but the same trace counts, and run again
    (which ingests it afresh): the first run's tables are gone, which the recorded build keys show
    (its settings and counts alone would not), so its export is refused, not another run's data
    written under its id; its report leaves out its text and drafts, and compare does not pair
    its traces with the new run's."""
    from specdraft.report.compare import compare_html, compare_runs, compare_text
    from specdraft.report.results import load_run
    from specdraft.report.trace_browser import browser_data

    data, root = tmp_path / "in" / "traces.parquet", tmp_path / "warehouse"
    data.parent.mkdir()
    shutil.copy(FIXTURE, data)
    first = run_all(SEED, root, str(data), "unused", name=DATASET)
    export_bundle(root, first["run_id"], tmp_path / "before")  # its own tables: taken
    other_settings = dataclasses.replace(SEED, backoff_min_context_len=6)
    first_other = run_all(other_settings, root, str(data), "unused", name=DATASET)  # same data, other choices
    _traces_with_other_responses(FIXTURE, data)
    second = run_all(SEED, root, str(data), "unused", name=DATASET)
    assert second["eval_examples"] == first["eval_examples"] and second["selected"] != first["selected"]
    with pytest.raises(SpecdraftError, match="rebuilt since .*ngram_tables, candidates"):
        export_bundle(root, first["run_id"], tmp_path / "bundle")
    export_bundle(root, second["run_id"], tmp_path / "bundle")
    with Warehouse(root, read_only=True, dataset=DATASET, memory_limit=None) as wh:
        # its report embeds no trace text (the warehouse's is the new data's), and says why
        page = browser_data(wh, load_run(root, first["run_id"]))
        assert page["drafts_note"].startswith("text and drafts not shown") and page["traces"] == []
        page = browser_data(wh, load_run(root, second["run_id"]))
        assert page["drafts_note"] == "" and page["traces"]
    # nor its contexts (their text and counts were the new traces', at the old run's positions)
    from specdraft.report.html import CONTEXTS_GONE, write_html_report

    for run, gone in ((first, True), (second, False)):
        page = write_html_report(root, load_run(root, run["run_id"]), tmp_path / f"{run['run_id']}.html").read_text()
        assert (CONTEXTS_GONE in page) == gone
        table = re.search(r'<table id="contexts">.*?</table>', page, re.DOTALL).group()
        assert (table.count("<tr>") > 1) != gone  # a row past the header
    # compare does not pair the two runs' traces: their ids are the same, their texts are not
    assert not compare_runs(root, first["run_id"], second["run_id"])["same_traces"]
    third = run_all(other_settings, root, str(data), "unused", name=DATASET)
    assert compare_runs(root, second["run_id"], third["run_id"])["same_traces"]
    # two runs before the new data pair up, but their positions' text is gone, and the page says so
    before = compare_runs(root, first["run_id"], first_other["run_id"])
    assert before["same_traces"] and before["choices"]["differ"] and before["examples"] == []
    assert "examples (--html) not shown: the dataset was ingested afresh" in compare_text(before)
    assert "Examples not shown: the dataset was ingested afresh" in compare_html(before)
    after = compare_runs(root, second["run_id"], third["run_id"])
    assert after["examples"] and "not shown" not in compare_html(after)


def test_a_path_with_a_bar_is_its_own_runs(tmp_path):
    """A '|' in the input's path (which the build keys hold) does not make the run's own tables
    look rebuilt."""
    from specdraft.report.results import record_run

    data = tmp_path / "pipe|dir" / "traces.parquet"
    data.parent.mkdir()
    shutil.copy(FIXTURE, data)
    results = run_all(SEED, tmp_path / "warehouse", str(data), "unused", name=DATASET)
    export_bundle(tmp_path / "warehouse", results["run_id"], tmp_path / "bundle")
    with Warehouse(tmp_path / "warehouse", dataset=DATASET) as wh:
        record_run(wh, dict(results), run_id="older-run")  # as runs before run_builds: no build keys
    export_bundle(tmp_path / "warehouse", "older-run", tmp_path / "older-bundle")


def test_the_replay_command_prints_its_figures(built):
    root, _ = built
    runner = CliRunner()
    table = runner.invoke(main, ["replay", "--warehouse", str(root / "warehouse"), "--bundle", str(root / "bundle")])
    assert table.exit_code == 0, table.output
    default = built[1]["preset"] == "default"  # its drafts are also walked cut at the run's --verify-cost
    assert "(100.0000%)" in table.output and table.output.count("  yes") == 2 + default
    out = runner.invoke(main, ["replay", "--warehouse", str(root / "warehouse"), "--bundle", str(root / "bundle"),
                               "--format", "json"])
    figures = json.loads(out.output)
    assert figures["exact_share"] == 1.0 and figures["latency_us"]["propose"]["calls"] == figures["positions"]
    cut = figures["cut_decode_step"]
    if not default:
        assert cut is None
        return
    run_row = built[1]["draft_length"]["adaptive"][str(built[1]["config"]["verify_cost"])]
    assert cut["equal"] and cut["live"] == cut["run"] and cut["run"]["steps"] == run_row["steps"]
    assert 0 < cut["live"]["drafted_per_step"] < 16 and f"cut at verify cost {cut['verify_cost']:g}" in table.output


def test_replay_fails_where_the_cut_drafts_are_not_the_runs(default_built, monkeypatch):
    """The third walk, drafts cut at the run's --verify-cost, is checked like the other two."""
    root, _ = default_built
    honest = live_replay.cut_walk

    def one_more_drafted(*args):
        drafted, accepted = honest(*args)
        return drafted + 1, accepted

    monkeypatch.setattr(live_replay, "cut_walk", one_more_drafted)
    result = CliRunner().invoke(main, ["replay", "--warehouse", str(root / "warehouse"), "--bundle", str(root / "bundle")])
    assert result.exit_code == 1 and "  NO" in result.stdout
    assert result.stderr.strip() == "specdraft: error: the live drafter is not the run's: its cut decode step figures differ"


def test_replay_refuses_another_runs_bundle(built, tmp_path):
    root, _ = built
    copy = tmp_path / "bundle"
    shutil.copytree(root / "bundle", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["run_id"] = "someone-else"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdraftError, match="exported from run someone-else"):
        replay(root / "warehouse", None, copy)


def test_every_position_checks_its_rows(drafter, eval_traces, built):
    """The walk refuses eval positions that do not line up with the traces."""
    import pyarrow as pa

    trace_id, prompt_len, tokens = eval_traces[0]
    chosen = pa.table({"trace_id": [trace_id], "pos": [prompt_len + 1], "source": ["copy:4"],
                       "draft": pa.array([[1]], pa.list_(pa.int32())),
                       "second_draft": pa.array([[1]], pa.list_(pa.int32()))})
    with pytest.raises(SpecdraftError, match="no row for trace"):
        every_position(drafter, [trace_id], [prompt_len], [tokens], chosen)


# -- --preset default: the sources beyond the seed and the confidence model -----------------------

@pytest.mark.parametrize("name", ["default", "rank2"])
def test_default_drafts_and_features_are_the_warehouses(name, request):
    """At every eval position, every family's drafts (the seed's four, recent copies, the n-gram at
    every length, and rank 2 from a run that proposed it) with their context lengths, counts and
    copy distances are the candidates table's, in eval_features' order; the selectable ones'
    feature rows are candidate_features' rows, number for number."""
    from specdraft.live.confidence import feature_rows, last_known
    from specdraft.policy.confidence import NUMERIC_FEATURES, feature_matrix, selectable

    default_built = request.getfixturevalue(f"{name}_built")
    drafter = Drafter.load(default_built[0] / "bundle")
    with Warehouse(default_built[0] / "warehouse", read_only=True, dataset=DATASET, memory_limit=None) as wh:
        features = wh.run_text(
            "select f.*, c.draft from candidate_features as f join candidates as c using (trace_id, pos, source) "
            "where f.split = 'eval' order by trace_id, pos, family_order, ctx_len").to_arrow_table()
    matrix = feature_matrix(selectable(features))
    chosen = selectable(features).select(["trace_id", "pos"]).to_pylist()
    rows = features.select(["trace_id", "pos", "family_order", "ctx_len", "count", "copy_distance", "draft"]).to_pylist()
    expected: dict[tuple[int, int], list[tuple]] = {}
    for row in rows:
        expected.setdefault((row["trace_id"], row["pos"]), []).append(
            (row["family_order"], row["ctx_len"], row["count"], row["copy_distance"], list(row["draft"])))
    want_rows: dict[tuple[int, int], list] = {}
    for key, vector in zip(((r["trace_id"], r["pos"]) for r in chosen), matrix.tolist()):
        want_rows.setdefault(key, []).append(vector)
    orders, checked = set(), 0
    for trace_id, prompt_len, tokens in _eval_traces(default_built[0]):
        session = drafter.start(tokens[:prompt_len])
        for pos in range(prompt_len, len(tokens)):
            live = session._candidates()
            got = [(c.order, c.ctx_len, c.count, c.distance, list(c.draft)) for c in live]
            assert got == expected.get((trace_id, pos), []), (trace_id, pos)
            live_matrix = feature_rows(live, pos - prompt_len, last_known(tokens[:pos]),
                                       [i for i, c in enumerate(live) if c.order in drafter.choices], session._known)
            assert live_matrix.tolist() == want_rows.get((trace_id, pos), []), (trace_id, pos)
            orders |= {c.order for c in live}
            checked += len(live)
            session.extend([tokens[pos]])
    # every family but online (arithmetic: the fixture's eval traces calculate), and rank 2 where
    # the run proposed it
    left_out = {"online"} | ({"ngram-rank2"} if name == "default" else set())
    assert checked > 5000 and orders == {families.ORDER[f] for f in families.NAMES if f not in left_out}, orders
    assert (drafter.bundle.ngram_rank2 is not None) == (name == "rank2")
    assert len(NUMERIC_FEATURES) + 1 == matrix.shape[1]


def test_default_propose_many_is_the_runs_multi_draft(default_built, default_drafter):
    """The best accepted length among propose_many(k)'s drafts, averaged over eval positions, is the
    run's multi-draft top-k figure: the same k distinct drafts, ranked by the same scores."""
    from specdraft.policy.evaluate import accepted_prefix

    _, results = default_built
    drafter = default_drafter
    best = {2: [], 4: []}
    for _, prompt_len, tokens in _eval_traces(default_built[0]):
        session = drafter.start(tokens[:prompt_len])
        for pos in range(prompt_len, len(tokens)):
            actual = tokens[pos : pos + drafter.draft_len]
            for k, accepted in best.items():
                drafts = session.propose_many(k)
                assert len(drafts) <= k and len({tuple(d) for d in drafts}) == len(drafts)
                accepted.append(max((accepted_prefix(d, actual, drafter.draft_len) for d in drafts), default=0))
            # the single pick chooses among the selectable drafts only, propose_many among the
            # evidence drafts too (families.IN_TREES): the pick is one of them, or, where it chose
            # again past its first token (ConfidencePolicy.chain), starts as one and is as long
            single, many = session.propose(), session.propose_many(64)
            assert not single or single in many or any(d[:1] == single[:1] and len(d) == len(single) for d in many)
            session.extend([tokens[pos]])
    for k, accepted in best.items():
        assert sum(accepted) / len(accepted) == results["multi_draft"][f"top{k}"]["avg_accepted"]


def test_default_propose_tree_is_the_runs_token_tree(default_built, default_drafter):
    """propose_tree(budget)'s trees, matched against each eval position's next tokens, give the
    run's tree_b<budget> figure exactly; each is a tree of at most budget tokens whose parents come
    first, and a bigger budget's tree holds the smaller's nodes."""
    _, results = default_built
    drafter = default_drafter
    accepted = {16: [], 32: [], 64: []}
    for _, prompt_len, tokens in _eval_traces(default_built[0]):
        session = drafter.start(tokens[:prompt_len])
        for pos in range(prompt_len, len(tokens)):
            actual = tokens[pos : pos + drafter.draft_len]
            trees = {budget: session.propose_tree(budget) for budget in accepted}
            for budget, tree in trees.items():
                assert len(tree.token_ids) == len(tree.parents) <= budget
                assert all(-1 <= parent < i for i, parent in enumerate(tree.parents))
                accepted[budget].append(tree.accepted(actual))
            small, big = trees[16], trees[64]
            assert big.token_ids[: len(small.token_ids)] == small.token_ids
            session.extend([tokens[pos]])
    for budget, values in accepted.items():
        assert sum(values) / len(values) == results["multi_draft"][f"tree_b{budget}"]["avg_accepted"], budget
    assert results["multi_draft"]["tree_b64"]["avg_accepted"] > results["selected"]["avg_accepted"]


def test_default_propose_with_a_verify_cost_walks_as_the_runs_adaptive_length(default_built, default_drafter):
    """A decode walk that drafts propose(verify_cost=c) at each step (a + 1 tokens a step) drafts
    and accepts, step for step, what the run's draft_length adaptive row at c says, and gets its
    expected speedup; the cut draft is a prefix of the full one, and costlier tokens draft fewer."""
    import numpy as np

    from specdraft.policy.evaluate import accepted_prefix

    _, results = default_built
    drafter = default_drafter
    drafted_per_cost = {}
    for cost in (0.02, 0.1):
        drafted, accepted = [], []
        for _, prompt_len, tokens in _eval_traces(default_built[0]):
            session = drafter.start(tokens[:prompt_len])
            pos = prompt_len
            while pos < len(tokens):
                draft = session.propose(verify_cost=cost)
                assert draft == session.propose()[: len(draft)]
                a = accepted_prefix(draft, tokens[pos : pos + drafter.draft_len], drafter.draft_len)
                drafted.append(len(draft))
                accepted.append(a)
                session.extend(tokens[pos : pos + a + 1])
                pos += a + 1
        want = results["draft_length"]["adaptive"][str(cost)]
        drafted, accepted = np.array(drafted), np.array(accepted)
        assert want["steps"] == len(drafted)
        assert want["drafted_per_step"] == float(drafted.mean())
        assert want["accepted_per_step"] == float(accepted.mean())
        assert want["speedup_at_its_cost"] == float(((1 + accepted) / (1 + cost * drafted)).mean())
        drafted_per_cost[cost] = drafted.mean()
    assert drafted_per_cost[0.1] < drafted_per_cost[0.02] < drafter.draft_len


def _with_policy(bundle: Path, tmp_path: Path, change) -> Path:
    """A copy of the bundle with change(policy) applied to its policy.json, signed again in the
    manifest (size and sha256), as an export that wrote that policy would have."""
    import hashlib

    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    policy = json.loads((copy / "policy.json").read_text())
    change(policy)
    (copy / "policy.json").write_text(json.dumps(policy))
    manifest = json.loads((copy / "manifest.json").read_text())
    data = (copy / "policy.json").read_bytes()
    manifest["files"]["policy.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_a_model_reading_other_features_is_refused(default_built, tmp_path):
    """A bundle whose model reads features this specdraft does not compute in that order (a
    newer specdraft's, or its columns swapped) is refused, naming its policy.json; only a model
    fitted on the first of them (an older bundle) is read, on those columns."""
    swapped = _with_policy(default_built[0] / "bundle", tmp_path,
                           lambda policy: policy["features"].insert(1, policy["features"].pop()))
    with pytest.raises(SpecdraftError) as excinfo:
        Drafter.load(swapped)
    _one_line_naming(excinfo, swapped / "policy.json", "reads features")


def test_a_bundle_from_before_per_draft_scoring_scores_every_copy(default_built, default_drafter, tmp_path):
    """A bundle whose policy.json has no "scoring" was exported by a run that scored every copy of
    a draft from its own features: it loads and scores as that run did, so copies of one draft may
    differ. This run's bundle scores a draft once, and its copies are equal."""
    old = _with_policy(default_built[0] / "bundle", tmp_path, lambda policy: policy.pop("scoring"))
    drafters = {"per draft": default_drafter, "per copy": Drafter.load(old)}
    assert drafters["per draft"].policy.per_draft and not drafters["per copy"].policy.per_draft
    copies_differ = {name: 0 for name in drafters}
    for _, prompt_len, tokens in _eval_traces(default_built[0])[:8]:
        for name, drafter in drafters.items():
            session = drafter.start(tokens[:prompt_len])
            for pos in range(prompt_len, len(tokens)):
                candidates = session._candidates()
                picked, scores = session._scores(candidates, trees=True)
                by_draft: dict[tuple, set] = {}
                for i, score in zip(picked, scores):
                    by_draft.setdefault(tuple(candidates[i].draft), set()).add(score)
                copies_differ[name] += sum(len(seen) > 1 for seen in by_draft.values())
                session.extend([tokens[pos]])
    assert copies_differ["per draft"] == 0 and copies_differ["per copy"] > 0, copies_differ


def test_propose_tree_needs_the_default_preset(seed_drafter, seed_eval_traces):
    """At every call: propose(verify_cost=) on a seed bundle raised only where there was a draft to
    cut (an empty prompt gave [] first), which in a decode loop fails now and then."""
    _, prompt_len, tokens = seed_eval_traces[0]
    for prompt in (tokens[:prompt_len], []):
        with seed_drafter.start(prompt) as session:
            for call in (lambda: session.propose_tree(16), lambda: session.propose(verify_cost=0.05)):
                with pytest.raises(ValueError, match="preset default"):
                    call()


def test_online_must_be_a_bool(default_built):
    for bad in ("no", 0, 1):
        with pytest.raises(ValueError, match="online must be True, False or None"):
            Drafter.load(default_built[0] / "bundle", online=bad)


def test_live_arguments_are_checked_at_every_call(default_built, default_drafter):
    """verify_cost must be a number from 0 to 10 (a NaN or inf cut drafts with numpy warnings, a
    string passed where there was no draft); numpy numbers are taken like Python's, bools are not."""
    import numpy as np

    _, prompt_len, tokens = _eval_traces(default_built[0])[0]
    for prompt in (tokens[:prompt_len], []):
        with default_drafter.start(prompt) as session:
            for bad in (-1, float("nan"), float("inf"), 1e308, "abc", True):
                with pytest.raises(ValueError, match="verify_cost must be a number from 0 to 10"):
                    session.propose(verify_cost=bad)
            for name, call in (("k", session.propose_many), ("budget", session.propose_tree)):
                for bad in (0, -2, 1.0, True, np.bool_(True), "4"):
                    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
                        call(bad)
            assert session.propose(verify_cost=np.float32(0.5)) == session.propose(verify_cost=0.5)
            assert session.propose_many(np.int64(3)) == session.propose_many(3)
            assert session.propose_tree(np.int32(8)) == session.propose_tree(8)


def test_a_queried_build_exports_the_bundle_of_a_build_of_every_context(built, tmp_path_factory):
    """The run's warehouse ranks only the contexts calibration and eval look up (the default,
    --ngram-contexts queried); its export ranks every context itself. The n-gram tables it writes are
    those of a build that ranked every context, byte for byte."""
    root, results = built
    everything = tmp_path_factory.mktemp("all-contexts")
    cfg = dataclasses.replace(DEFAULT if results["preset"] == "default" else SEED, ngram_contexts="all")
    run_all(cfg, everything / "warehouse", str(FIXTURE), "unused")
    export_bundle(everything / "warehouse", None, everything / "bundle")
    ranked = {}
    for where in (root, everything):
        with Warehouse(where / "warehouse", read_only=True, dataset=DATASET) as wh:
            ranked[where] = wh.row_count("exact_continuations")
    assert ranked[root] < ranked[everything]  # the run's table is the queried one
    files = {where: json.loads((where / "bundle" / "manifest.json").read_text())["files"] for where in (root, everything)}
    tables = [name for name in files[root] if name.endswith(".arrow")]
    assert {"ngram.arrow", "backoff.arrow"} <= set(tables)
    for name in tables:
        assert files[root][name] == files[everything][name], name


SPLIT_CHARACTERS = "龘Ⅻ "  # each two Qwen tokens, neither of which decodes alone


def _with_split_characters(path: Path) -> Path:
    """The parity fixture with SPLIT_CHARACTERS after every word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def inject(text):
        return None if text is None else re.sub(r"\b(\w+) ", lambda m: m.group(1) + " " + SPLIT_CHARACTERS, text)

    rows = pq.read_table(FIXTURE).to_pylist()
    pq.write_table(pa.Table.from_pylist([dict(row, problem=inject(row["problem"]),
                                              raw_reasoning=inject(row["raw_reasoning"])) for row in rows]), path)
    return path


def test_a_decode_step_over_split_characters_is_the_live_drafters(tmp_path):
    """--preset default's decode-step figures walk over its every-position choices. Prompt
    autocomplete decoded the current line chunk by chunk (token by token at every position), so a
    character split over two tokens was U+FFFDs there but the character in a live decode step,
    whose chunks are whole accepted drafts: the replay's decode step differed from the run's (a
    helper's review: 3.664789 live against 3.665728 on the demo's text with these characters).
    The line is now decoded whole (drafters/autocomplete.py), and the two are equal."""
    from specdraft.sources.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(DEFAULT.tokenizer)
    assert any("\ufffd" in tokenizer.decode([token]) for token in tokenizer.encode(SPLIT_CHARACTERS))
    data = _with_split_characters(tmp_path / "split.parquet")
    results = run_all(DEFAULT, tmp_path / "warehouse", str(data), "unused")
    assert results["per_source"]["prompt-autocomplete"]["proposed"] > 0
    export_bundle(tmp_path / "warehouse", None, tmp_path / "bundle")
    figures = replay(tmp_path / "warehouse", None, tmp_path / "bundle")
    assert figures["exact_share"] == 1.0
    assert figures["every_position"]["equal"] and figures["decode_step"]["equal"], figures["decode_step"]


@pytest.mark.parametrize("vocabulary", ["qwen", "llama"])
def test_a_whole_line_is_the_same_whichever_positions_were_visited(tmp_path, vocabulary):
    """PromptAutocomplete(text_from_tokens=True): the current line at a position is one function of
    the tokens before it, its tokens' bytes decoded (the decode of the line, but for a
    SentencePiece line's leading space), for a byte-level vocabulary and a SentencePiece-style
    one with byte fallback; chunk by chunk, as the seed decodes, it depends on the visits."""
    from specdraft.drafters.autocomplete import PromptAutocomplete
    from specdraft.sources.tokenizer import load_tokenizer

    from .test_tokenizer import _write_sentencepiece_tokenizers

    if vocabulary == "qwen":
        tokenizer = load_tokenizer(DEFAULT.tokenizer)
    else:
        _write_sentencepiece_tokenizers(tmp_path)
        tokenizer = load_tokenizer(str(tmp_path / "llama"))
    prompt = f"Count the {SPLIT_CHARACTERS}coins of the {SPLIT_CHARACTERS}box.\n"
    tokens = tokenizer.encode(prompt + f"So the {SPLIT_CHARACTERS}coins:\nthe {SPLIT_CHARACTERS}box has 3 of the "
                                       f"{SPLIT_CHARACTERS}coins")
    prompt_len = len(tokenizer.encode(prompt))
    assert any("\ufffd" in tokenizer.decode([token]) for token in tokens[prompt_len:])  # characters split
    positions = range(len(tokens) - prompt_len + 1)

    def lines(whole: bool, visited) -> dict[int, str]:
        walker = PromptAutocomplete(tokenizer, prompt, tokens, prompt_len, 16, text_from_tokens=whole)
        return {cpos: walker.line_at(cpos) for cpos in visited}

    every = lines(True, positions)
    assert every[len(positions) - 1].lstrip() == f"the {SPLIT_CHARACTERS}box has 3 of the {SPLIT_CHARACTERS}coins"
    decoded = {cpos: tokenizer.decode(tokens[prompt_len : prompt_len + cpos]).rsplit("\n", 1)[-1] for cpos in positions}
    whole = [cpos for cpos in positions if "\ufffd" not in decoded[cpos]]  # (inside a character the
    assert len(whole) > len(positions) / 2  # replacement characters may be counted otherwise)
    assert {cpos: every[cpos].lstrip() for cpos in whole} == {cpos: decoded[cpos].lstrip() for cpos in whole}
    for step in (2, 3, 5):
        visited = positions[::step]
        assert lines(True, visited) == {cpos: every[cpos] for cpos in visited}
    chunked = lines(False, positions)
    assert chunked != every and "\ufffd" in chunked[len(positions) - 1]


def _with_decomposed_accents(path: Path) -> Path:
    """The parity fixture with "Cafe" + a combining acute accent (not NFC, which Qwen's tokenizer
    applies) before every "the " of its prompts and responses."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def inject(text):
        return None if text is None else text.replace("the ", "the Cafe\u0301 mugs of the ")

    rows = pq.read_table(FIXTURE).to_pylist()
    pq.write_table(pa.Table.from_pylist([dict(row, problem=inject(row["problem"]),
                                              raw_reasoning=inject(row["raw_reasoning"])) for row in rows]), path)
    return path


@pytest.mark.parametrize("cfg", [SEED, DEFAULT], ids=["seed", "default"])
def test_a_prompt_the_tokenizer_normalises_replays_exactly(tmp_path, cfg):
    """A session decoded its prompt's tokens for prompt autocomplete, where the run had read the
    dataset's text: with a prompt not in NFC (which Qwen's tokenizer applies), the two differed,
    and a helper's replay under --preset seed matched 745 of 790 positions (every position 3.863
    live against 4.049), with exit 0. A session now takes the prompt's text (prompt_text), which
    replay passes, and --preset default reads the decode in the warehouse too."""
    data = _with_decomposed_accents(tmp_path / "nfd.parquet")
    run_all(cfg, tmp_path / "warehouse", str(data), "unused")
    export_bundle(tmp_path / "warehouse", None, tmp_path / "bundle")
    result = CliRunner().invoke(main, ["replay", "--warehouse", str(tmp_path / "warehouse"),
                                       "--bundle", str(tmp_path / "bundle"), "--format", "json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["exact_share"] == 1.0 and figures["every_position"]["equal"] and figures["decode_step"]["equal"]


def test_replay_fails_where_the_live_drafter_is_not_the_runs(built, monkeypatch):
    """A replay whose live drafts differ from the run's printed a warning and exited 0 (its
    'equal' column compares histograms, which can agree): a script or CI could not tell. It
    now fails after the table, saying what differs."""
    root, _ = built
    honest = live_replay.replay

    def one_draft_off(*args):
        result = honest(*args)
        return {**result, "exact_positions": result["positions"] - 1}

    monkeypatch.setattr(live_replay, "replay", one_draft_off)
    result = CliRunner().invoke(main, ["replay", "--warehouse", str(root / "warehouse"), "--bundle", str(root / "bundle")])
    assert result.exit_code == 1 and result.stdout.startswith("run ")  # the table first
    assert result.stderr.strip() == "specdraft: error: the live drafter is not the run's: its draft differs at 1 positions"


def test_a_bundle_carries_a_local_tokenizer_and_loads_without_it(tmp_path, monkeypatch):
    """A run tokenized with a local tokenizer directory recorded its path as given: the bundle
    loaded only where that path still led (a helper's review: `--tokenizer ./tok`, then any other
    folder failed with "tokenizer path './tok' was not found"). The path is now recorded whole, and
    the bundle carries the tokenizer's files (checksummed with its others) and loads them."""
    from .test_tokenizer import _write_local_hf_tokenizer

    _write_local_hf_tokenizer(tmp_path / "tok")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--preset", "seed", "--data", str(FIXTURE), "--tokenizer", "tok",
                                       "--warehouse", "wh", "--out", "out", "--max-completion-tokens", "60"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "results.json").read_text())["config"]["tokenizer"] == str(tmp_path / "tok")
    export_bundle(tmp_path / "wh", None, tmp_path / "bundle")
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["tokenizer"]["bundled"] == "tokenizer" and "tokenizer/tokenizer.json" in manifest["files"]
    with Drafter.load(tmp_path / "bundle").start([1, 2, 3]) as session:
        before = session.propose()
    shutil.move(tmp_path / "tok", tmp_path / "elsewhere")  # the run's tokenizer is gone from its path
    drafter = Drafter.load(tmp_path / "bundle")
    with drafter.start([1, 2, 3]) as session:
        assert session.propose() == before
    (tmp_path / "bundle" / "tokenizer" / "tokenizer.json").write_text("{}")
    with pytest.raises(SpecdraftError, match="tokenizer.json"):
        Drafter.load(tmp_path / "bundle")


def test_a_sentencepiece_vocabularys_text_drafts_are_accepted(tmp_path):
    """Prompt autocomplete and arithmetic encoded a draft's text alone, and a SentencePiece-style
    vocabulary marks a text's start as a word's: the rest of 'tickets' after 'tic' became
    '▁kets', ' 12' '▁▁12', so with a Llama-style tokenizer none of their drafts was accepted (a
    helper's review: 93 and 92 proposed, hit rate 0). Under --preset default they are encoded as
    they follow the known text (Tokenizer.encode_after), and are accepted; --preset seed keeps the
    seed's encoding; live drafts equal the run's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .test_tokenizer import CORPUS, _write_sentencepiece_tokenizers

    _write_sentencepiece_tokenizers(tmp_path)
    rows = []
    for i in range(60):
        split = "train" if i < 40 else "calibration" if i < 50 else "eval"
        problem = f"Jose buys {i + 3} tickets for the show at the cafe. What is {i + 3} * 5?"
        reasoning = (f"Given: Jose buys {i + 3} tickets for the show at the cafe.\n"
                     f"So the cost is {i + 3} * 5 = {5 * (i + 3)} dollars.\n{CORPUS[i % 3]}")
        rows.append({"problem": problem, "problem_source": "", "raw_reasoning": reasoning, "split": split})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "quotes.parquet")
    cfg = dataclasses.replace(DEFAULT, tokenizer=str(tmp_path / "llama"))
    results = run_all(cfg, tmp_path / "wh", str(tmp_path / "quotes.parquet"), "unused")
    for family in ("prompt-autocomplete", "arithmetic"):  # most of its drafts get a token accepted
        alone = results["per_source"][family]
        hits = round(alone["hit_rate"] * alone["positions"])
        assert alone["proposed"] > 0 and hits > alone["proposed"] / 2, (family, hits, alone["proposed"])
    export_bundle(tmp_path / "wh", None, tmp_path / "bundle")
    figures = replay(tmp_path / "wh", None, tmp_path / "bundle")
    assert figures["exact_share"] == 1.0 and figures["decode_step"]["equal"]


def test_a_version_1_bundle_loads_and_drafts_as_its_run(built, bundle_copy):
    """Bundles from before 2026-12-07 (format version 1, policy.json without autocomplete_text)
    still load, and read prompt autocomplete's text as their runs did: on the fixture's text,
    which has no character split over tokens, the same drafts as the run's."""
    import hashlib

    policy_path = bundle_copy / "policy.json"
    policy = json.loads(policy_path.read_text())
    policy.pop("autocomplete_text", None)
    policy_path.write_text(json.dumps(policy))
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    manifest["format_version"] = 1
    manifest["files"]["policy.json"] = {"bytes": policy_path.stat().st_size,
                                        "sha256": hashlib.sha256(policy_path.read_bytes()).hexdigest()}
    (bundle_copy / "manifest.json").write_text(json.dumps(manifest))
    drafter = Drafter.load(bundle_copy)
    assert not getattr(drafter.policy, "text_from_tokens", False)
    figures = replay(built[0] / "warehouse", None, bundle_copy)
    assert figures["exact_share"] == 1.0


def test_a_warehouse_without_its_traces_file_replays_what_it_can(built, tmp_path):
    """replay read the traces Parquet for the prompts' text under every preset (a DuckDB IO error
    where a warehouse was copied without traces/); --preset default's runs read the prompt from its
    tokens and replay without it, and --preset seed's says what it lacks."""
    root, results = built
    shutil.copytree(root / "warehouse", tmp_path / "wh", ignore=shutil.ignore_patterns("traces"))
    if results["preset"] == "default":
        assert replay(tmp_path / "wh", None, root / "bundle")["exact_share"] == 1.0
    else:
        with pytest.raises(SpecdraftError, match=r"parquet: not found; this run's prompt autocomplete read"):
            replay(tmp_path / "wh", None, root / "bundle")
