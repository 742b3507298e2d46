"""The vLLM proposer, called as vLLM's GPU model runner calls a `custom_class` proposer (vLLM main,
vllm/v1/worker/gpu_model_runner.py at 000fc94b754f, propose_draft_token_ids):

    drafter.propose(sampled_token_ids, input_batch.num_tokens_no_spec, input_batch.token_ids_cpu,
                    slot_mappings=slot_mappings)

after _bookkeeping_sync has written each row's sampled tokens into token_ids_cpu and advanced
num_tokens_no_spec. `Batch` below keeps those two buffers as vLLM's InputBatch does
(vllm/v1/worker/gpu_input_batch.py: add_request into the first free row, remove_request leaving a
hole, condense filling holes from the end, swap_states for reordering); `walk` plays the fixture's
eval traces through it as a greedy target model would, verifying each draft. Every draft must be
what a fresh Drafter session fed the same prompt and tokens proposes.
"""

from __future__ import annotations

import dataclasses
import importlib
import random
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from specdraft import Drafter
from specdraft.errors import SpecdraftError
from specdraft.integrations.vllm import BUNDLE_ENV, VERIFY_COST_ENV, SpecdraftProposer
from specdraft.live.bundle import export_bundle
from specdraft.pipeline import run_all
from specdraft.warehouse.connection import Warehouse

from .test_parity import FIXTURE, SEED

DEFAULT = dataclasses.replace(SEED, preset="default")

MAX_MODEL_LEN = 400
K = 12  # num_speculative_tokens below the bundle's draft_len (16): drafts are cut to it


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A --preset seed run of the parity fixture, its bundle, and its eval traces."""
    root = tmp_path_factory.mktemp("vllm")
    run_all(SEED, root / "warehouse", str(FIXTURE), "unused")
    export_bundle(root / "warehouse", None, root / "bundle")
    return root / "bundle", bundle_traces(root / "bundle")


def bundle_traces(bundle) -> list[tuple[int, list[int]]]:
    """(prompt_len, tokens) of each eval trace of the run beside the bundle."""
    with Warehouse(bundle.parent / "warehouse", read_only=True, dataset="parity_traces", memory_limit=None) as wh:
        table = wh.query("live/replay_traces").to_arrow_table()
    return list(zip(table.column("prompt_len").to_pylist(), table.column("tokens").to_pylist()))


@pytest.fixture(autouse=True)
def no_verify_cost_from_the_shell(monkeypatch):
    """The proposers here draft in full unless a test sets SPECDRAFT_VERIFY_COST itself."""
    monkeypatch.delenv(VERIFY_COST_ENV, raising=False)


@pytest.fixture(scope="module")
def drafter(bundle):
    return Drafter.load(bundle[0])


@pytest.fixture(scope="module")
def default_bundle(tmp_path_factory):
    """The bundle of a --preset default run of the parity fixture (its drafts can be cut to a length)."""
    root = tmp_path_factory.mktemp("vllm-default")
    run_all(DEFAULT, root / "warehouse", str(FIXTURE), "unused")
    export_bundle(root / "warehouse", None, root / "bundle")
    return root / "bundle"


def vllm_config(num_speculative_tokens: int = K, max_model_len: int = MAX_MODEL_LEN):
    """What the proposer reads of vLLM's VllmConfig."""
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=num_speculative_tokens),
                           model_config=SimpleNamespace(max_model_len=max_model_len))


class Recording:
    """The drafter, keeping every session the proposer starts (to check each is closed)."""

    def __init__(self, drafter):
        self._drafter, self.sessions = drafter, []
        self.vocab_size, self.tokenizer = drafter.vocab_size, drafter.tokenizer
        self.verify_cost, self.checked_verify_cost = drafter.verify_cost, drafter.checked_verify_cost

    def start(self, prompt_ids):
        session = self._drafter.start(prompt_ids)
        self.sessions.append(session)
        return session


def closed(session) -> bool:
    try:
        session.propose()
    except ValueError:
        return True
    return False


class Batch:
    """The two InputBatch buffers the proposer reads, changed as vLLM changes them."""

    def __init__(self, max_num_reqs: int, max_model_len: int = MAX_MODEL_LEN):
        self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(max_num_reqs, dtype=np.int32)
        self.req_ids: list[str | None] = []

    def add(self, req_id: str, tokens: list[int]) -> None:
        """add_request: the first free row (a hole before condense), the prompt and outputs so far."""
        row = self.req_ids.index(None) if None in self.req_ids else len(self.req_ids)
        if row == len(self.req_ids):
            self.req_ids.append(req_id)
        self.req_ids[row] = req_id
        self.token_ids_cpu[row, : len(tokens)] = tokens
        self.num_tokens_no_spec[row] = len(tokens)

    def remove(self, req_id: str) -> None:
        self.req_ids[self.req_ids.index(req_id)] = None

    def condense(self) -> None:
        """Move the last requests into the holes (copying only their tokens: stale ids stay beyond)."""
        while None in self.req_ids:
            hole = self.req_ids.index(None)
            last = max(i for i, r in enumerate(self.req_ids) if r is not None) if any(self.req_ids) else -1
            if last < hole:
                del self.req_ids[hole:]
                break
            n = self.num_tokens_no_spec[last]
            self.token_ids_cpu[hole, :n] = self.token_ids_cpu[last, :n]
            self.num_tokens_no_spec[hole] = n
            self.req_ids[hole], self.req_ids[last] = self.req_ids[last], None

    def swap(self, i: int, j: int) -> None:
        self.token_ids_cpu[[i, j]] = self.token_ids_cpu[[j, i]]
        self.num_tokens_no_spec[[i, j]] = self.num_tokens_no_spec[[j, i]]
        self.req_ids[i], self.req_ids[j] = self.req_ids[j], self.req_ids[i]

    def schedule_draft(self, row: int, draft: list[int]) -> None:
        """_update_states writes the scheduled draft after the known tokens."""
        n = self.num_tokens_no_spec[row]
        self.token_ids_cpu[row, n : n + len(draft)] = draft

    def bookkeep(self, row: int, sampled: list[int]) -> None:
        """_bookkeeping_sync: the sampled tokens after the known ones, num_tokens_no_spec advanced."""
        n = self.num_tokens_no_spec[row]
        self.token_ids_cpu[row, n : n + len(sampled)] = sampled
        self.num_tokens_no_spec[row] = n + len(sampled)


@dataclass
class Request:
    req_id: str
    prompt: list[int]
    output: list[int]  # what the (greedy) target model produces
    prefill_steps: int = 1  # steps of prefill; all but the last sample nothing
    produced: list[int] = field(default_factory=list)
    draft: list[int] = field(default_factory=list)
    drafted: int = 0  # draft tokens proposed for it, in all
    # the tokens before the first call that brought it sampled tokens: its session's prompt (more
    # than the prompt when vLLM skipped drafting at its first steps)
    known_at_join: int | None = None

    @property
    def done(self) -> bool:
        return len(self.produced) == len(self.output)


def requests_of(traces) -> list[Request]:
    """The eval traces as requests, a twin (the same prompt and output), a fork (one's prompt, its
    output for 30 tokens, then another's) and one chunk-prefilled over three steps."""
    out = [Request(f"r{i}", t[:p], t[p:]) for i, (p, t) in enumerate(traces)]
    (p0, t0), (p1, t1), (p2, t2) = traces[:3]
    out.insert(2, Request("twin", t0[:p0], t0[p0:]))
    out.insert(4, Request("fork", t1[:p1], t1[p1 : p1 + 30] + t2[p2:]))
    out[5].prefill_steps = 3
    return out


def expected(drafter, request: Request, room: int, verify_cost: float | None = None) -> list[int]:
    """A fresh session's draft after the same tokens (cut at verify_cost, if given)."""
    if room <= 0:
        return []
    tokens = request.prompt + request.produced
    with drafter.start(tokens[: request.known_at_join]) as session:
        session.extend(tokens[request.known_at_join :])
        return session.propose(verify_cost=verify_cost)[:room]


def walk(proposer, drafter, requests, *, max_num_reqs=4, seed=0, skip_every=0, leave_out_every=0,
         num_spec=K, max_model_len=MAX_MODEL_LEN, verify_cost=None) -> int:
    """Serve `requests` through `proposer` as vLLM's runner would, checking every draft; returns
    the number of drafts checked. Each step: finished requests leave the batch, waiting ones join
    its free rows, every `leave_out_every`-th step one running request is not scheduled (taken
    out, re-added the next step), rows are condensed and two swapped; the scheduled drafts are
    verified greedily against each request's output (accepted + 1 bonus token), and the proposer
    is called, except every `skip_every`-th step (vLLM then zeroes the drafts)."""
    rng = random.Random(seed)
    batch = Batch(max_num_reqs, max_model_len)
    waiting, running, left_out = deque(requests), [], []
    checked = step = 0
    while waiting or running or left_out:
        step += 1
        for request in [r for r in running if r.done]:
            running.remove(request)
            batch.remove(request.req_id)
        for request in left_out:
            batch.add(request.req_id, request.prompt + request.produced)
            running.append(request)
        left_out = []
        while waiting and len(running) < max_num_reqs:
            request = waiting.popleft()
            batch.add(request.req_id, request.prompt)
            running.append(request)
        if leave_out_every and step % leave_out_every == 0 and len(running) > 1:
            request = rng.choice([r for r in running if r.produced])
            running.remove(request)
            batch.remove(request.req_id)
            left_out.append(request)
        batch.condense()
        if len(batch.req_ids) > 1:
            batch.swap(*rng.sample(range(len(batch.req_ids)), 2))
        by_id = {r.req_id: r for r in running}
        sampled_token_ids = []
        for row, req_id in enumerate(batch.req_ids):
            request = by_id[req_id]
            batch.schedule_draft(row, request.draft)
            if request.prefill_steps > 1:
                request.prefill_steps -= 1
                sampled = []
            else:
                rest = request.output[len(request.produced):]
                accepted = next((i for i, (a, b) in enumerate(zip(request.draft, rest)) if a != b),
                                min(len(request.draft), len(rest)))
                sampled = rest[: accepted + 1]
            request.produced += sampled
            batch.bookkeep(row, sampled)
            sampled_token_ids.append(sampled)
        if skip_every and step % skip_every == 0:
            for request in running:
                request.draft = [0] * num_spec
            continue
        drafts = proposer.propose(sampled_token_ids, batch.num_tokens_no_spec, batch.token_ids_cpu,
                                  slot_mappings=None)
        assert len(drafts) == len(sampled_token_ids)
        for row, (req_id, sampled, draft) in enumerate(zip(batch.req_ids, sampled_token_ids, drafts)):
            request = by_id[req_id]
            assert type(draft) is list and all(type(t) is int for t in draft)
            n = int(batch.num_tokens_no_spec[row])
            if sampled and request.known_at_join is None:
                request.known_at_join = n - len(sampled)
            room = min(num_spec, max_model_len - n - 1)
            want = expected(drafter, request, room, verify_cost) if sampled else []
            assert draft == want, (step, req_id, len(request.produced))
            request.draft = draft
            request.drafted += len(draft)
            checked += 1
    return checked


def test_proposals_equal_a_fresh_sessions_as_requests_join_move_and_finish(drafter, bundle):
    recording = Recording(drafter)
    proposer = SpecdraftProposer(vllm_config(), drafter=recording)
    requests = requests_of(bundle[1])
    checked = walk(proposer, drafter, requests, leave_out_every=5)
    assert checked > 150 and all(r.done for r in requests)
    # one session per request (the twin its own; one left out for a step kept its own)
    assert len(recording.sessions) == len(requests)
    # those that finished more than idle_steps calls ago are closed; the last after idle_steps more
    assert 0 < proposer.num_requests < 4
    assert sum(map(closed, recording.sessions)) == len(requests) - proposer.num_requests
    empty = ([], np.zeros(4, np.int32), np.zeros((4, MAX_MODEL_LEN), np.int32))
    for _ in range(proposer.idle_steps + 1):
        assert proposer.propose(*empty) == []
    assert proposer.num_requests == 0 and all(closed(s) for s in recording.sessions)


def test_a_step_vllm_did_not_draft_for_is_caught_up(drafter, bundle):
    """vLLM skips the proposer for a step when a request nears max_model_len: the next call's
    rows hold tokens no call announced; each session catches up instead of starting over."""
    recording = Recording(drafter)
    proposer = SpecdraftProposer(vllm_config(), drafter=recording)
    requests = requests_of(bundle[1])
    assert walk(proposer, drafter, requests, skip_every=3, seed=1) > 100
    assert len(recording.sessions) == len(requests)
    # one request's first token came at a skipped step: its session's prompt holds it
    assert any(r.known_at_join > len(r.prompt) for r in requests)


def test_a_next_turn_starts_its_own_session(drafter, bundle):
    """A request whose prompt is a finished one's history and more (a chat's next turn) starts a
    session with its own prompt; it does not continue the finished request's."""
    first = requests_of(bundle[1])[0]
    recording = Recording(drafter)
    proposer = SpecdraftProposer(vllm_config(), drafter=recording)
    walk(proposer, drafter, [first])
    proposer.propose([], np.zeros(1, np.int32), np.zeros((1, MAX_MODEL_LEN), np.int32))
    history = first.prompt + first.output
    follow_up = Request("next", history + bundle[1][1][1][:20], bundle[1][1][1][20:60])
    walk(proposer, drafter, [follow_up])
    assert len(recording.sessions) == 2 and follow_up.known_at_join == len(follow_up.prompt)


def _call(proposer, rows: list[tuple[list[int], list[int]]]) -> list[list[int]]:
    """One propose call as vLLM's runner makes it: per row, the tokens before this step's and the
    ones sampled this step."""
    ids = np.zeros((len(rows), MAX_MODEL_LEN), np.int32)
    counts = np.zeros(len(rows), np.int32)
    for i, (before, sampled) in enumerate(rows):
        ids[i, : len(before) + len(sampled)] = before + sampled
        counts[i] = len(before) + len(sampled)
    return proposer.propose([sampled for _, sampled in rows], counts, ids)


def test_a_next_turn_at_the_next_call_starts_its_own_session(drafter, bundle):
    """On a server with no other request, a chat's next turn comes at the call right after its
    first turn's last token: it took that finished turn's session as one vLLM had not drafted for
    (a helper's review: 30 of 30 such turns; 16.6% of their drafts differed from a fresh
    session's). A turn that ended with a special token (end of turn) is not caught up; one that
    did not end is, as before."""
    end_of_turn = drafter.tokenizer.encode("<|im_end|>")
    assert len(end_of_turn) == 1 and end_of_turn[0] in drafter.tokenizer.end_ids
    assert drafter.tokenizer.encode("<|vision_end|>")[0] not in drafter.tokenizer.end_ids  # special, not an end
    (p0, t0), (_, t1) = bundle[1][:2]
    prompt, answer = t0[:p0], t0[p0 : p0 + 40]
    next_turn = prompt + answer + end_of_turn + t1[:20]
    for ended, sessions in ((end_of_turn, 2), ([], 1)):
        recording = Recording(drafter)
        proposer = SpecdraftProposer(vllm_config(), drafter=recording)
        _call(proposer, [(prompt, answer[:1])])
        _call(proposer, [(prompt + answer[:1], answer[1:] + ended)])  # the rest, at once
        turn = next_turn if ended else prompt + answer + t1[:20]
        draft = _call(proposer, [(turn, t1[20:21])])[0]
        assert len(recording.sessions) == sessions
        if ended:  # its own session, from its prompt: a fresh session's draft
            with drafter.start(turn) as fresh:
                fresh.extend(t1[20:21])
                assert draft == fresh.propose()[:K]


def test_drafts_stop_short_of_max_model_len(drafter, bundle):
    """A request that runs to max_model_len: drafts cut to max_model_len - n - 1, then none."""
    prompt_len, tokens = max(bundle[1], key=lambda t: len(t[1]))
    max_model_len = len(tokens)
    request = Request("long", tokens[:prompt_len], tokens[prompt_len:])
    proposer = SpecdraftProposer(vllm_config(16, max_model_len), drafter=drafter)
    assert walk(proposer, drafter, [request], num_spec=16, max_model_len=max_model_len) > 5


def test_a_request_away_past_idle_steps_starts_over(drafter, bundle):
    """Left out for longer than idle_steps calls, a request's session is closed; back, it starts
    again with its whole history as the prompt (the documented approximation)."""
    (p0, t0), (p1, t1) = bundle[1][:2]
    recording = Recording(drafter)
    proposer = SpecdraftProposer(vllm_config(), drafter=recording, idle_steps=2)
    batch = Batch(2)
    batch.add("a", t0[: p0 + 5])
    batch.add("b", t1[: p1 + 1])
    proposer.propose([t0[p0 : p0 + 5], t1[p1 : p1 + 1]], batch.num_tokens_no_spec, batch.token_ids_cpu)
    batch.remove("a")
    batch.condense()
    for n in range(2, 5):  # "b" runs alone for three calls
        batch.bookkeep(0, [t1[p1 + n - 1]])
        proposer.propose([[t1[p1 + n - 1]]], batch.num_tokens_no_spec, batch.token_ids_cpu)
    assert proposer.num_requests == 1 and closed(recording.sessions[0])
    batch.add("a", t0[: p0 + 5])
    batch.bookkeep(1, [t0[p0 + 5]])
    batch.bookkeep(0, [t1[p1 + 4]])
    drafts = proposer.propose([[t1[p1 + 4]], [t0[p0 + 5]]], batch.num_tokens_no_spec, batch.token_ids_cpu)
    with drafter.start(t0[: p0 + 6]) as whole, drafter.start(t1[:p1]) as b:
        b.extend(t1[p1 : p1 + 5])
        assert drafts == [b.propose()[:K], whole.propose()[:K]]
    assert len(recording.sessions) == 3


def test_token_ids_outside_the_vocabulary_retire_one_session(drafter, bundle):
    (p0, t0), (p1, t1) = bundle[1][:2]
    proposer = SpecdraftProposer(vllm_config(), drafter=drafter)
    batch = Batch(2)
    batch.add("a", t0[: p0 + 1])
    batch.add("b", t1[:p1] + [drafter.vocab_size])  # a padded-vocabulary id
    drafts = proposer.propose([[t0[p0]], [drafter.vocab_size]], batch.num_tokens_no_spec, batch.token_ids_cpu)
    with drafter.start(t0[:p0]) as a:
        a.extend([t0[p0]])
        assert drafts == [a.propose()[:K], []]
    batch.bookkeep(1, [t1[p1]])
    assert proposer.propose([[], [t1[p1]]], batch.num_tokens_no_spec, batch.token_ids_cpu) == [[], []]
    assert proposer.num_requests == 2


def test_vllm_builds_it_from_its_config_and_the_environment(bundle, monkeypatch):
    """As vllm/v1/spec_decode/custom_class_proposer.py (f7490e78408f) create_custom_proposer does:
    speculative_config.model names the class, built with the VllmConfig alone."""
    config = vllm_config()
    config.speculative_config.model = "specdraft.integrations.vllm.SpecdraftProposer"
    module_path, class_name = config.speculative_config.model.rsplit(".", 1)
    user_class = getattr(importlib.import_module(module_path), class_name)
    monkeypatch.setenv(BUNDLE_ENV, str(bundle[0]))
    instance = user_class(config)
    assert callable(instance.propose) and instance.drafter.draft_len == 16
    assert instance.load_model(object()) is None
    monkeypatch.delenv(BUNDLE_ENV)
    with pytest.raises(SpecdraftError, match=BUNDLE_ENV):
        user_class(config)


def test_drafts_cut_at_the_environments_verify_cost_are_a_fresh_sessions(default_bundle, monkeypatch):
    """SPECDRAFT_VERIFY_COST=run: each draft is a fresh session's propose(verify_cost=the run's
    --verify-cost), cut to num_speculative_tokens; fewer tokens than the full drafts."""
    drafter = Drafter.load(default_bundle)
    traces = bundle_traces(default_bundle)
    monkeypatch.setenv(BUNDLE_ENV, str(default_bundle))
    monkeypatch.setenv(VERIFY_COST_ENV, "run")
    cut = SpecdraftProposer(vllm_config())
    monkeypatch.delenv(VERIFY_COST_ENV)
    full = SpecdraftProposer(vllm_config(), drafter)
    assert cut.verify_cost == drafter.verify_cost == 0.02 and full.verify_cost is None
    drafted = {}
    for name, proposer, cost in (("cut", cut, drafter.verify_cost), ("full", full, None)):
        requests = requests_of(traces)
        assert walk(proposer, drafter, requests, leave_out_every=5, verify_cost=cost) > 150
        drafted[name] = sum(r.drafted for r in requests)
    assert 0 < drafted["cut"] < 0.8 * drafted["full"], drafted


@pytest.mark.parametrize("value, message", [("run", "need a --preset default bundle"),
                                            ("0.5x", "a verify cost is a number from 0 to 10 or 'run'"),
                                            ("11", "a verify cost is a number from 0 to 10 or 'run' .*not '11'"),
                                            ("1_0", "not '1_0'"), ("-0", "not '-0'")])
def test_a_verify_cost_the_bundle_cannot_cut_at_is_refused_when_vllm_builds_it(bundle, value, message, monkeypatch):
    monkeypatch.setenv(BUNDLE_ENV, str(bundle[0]))
    monkeypatch.setenv(VERIFY_COST_ENV, value)
    with pytest.raises(SpecdraftError, match=f"{VERIFY_COST_ENV}: .*{message}"):
        SpecdraftProposer(vllm_config())
