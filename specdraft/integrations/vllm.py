"""specdraft's live drafter as a vLLM speculative proposer (vLLM's `custom_class` method).

    SPECDRAFT_BUNDLE=drafter/ vllm serve Qwen/Qwen2.5-7B-Instruct --speculative-config \\
        '{"method": "custom_class", "model": "specdraft.integrations.vllm.SpecdraftProposer",
          "num_speculative_tokens": 16}'

With SPECDRAFT_VERIFY_COST=c (a number from 0 to 10, or "run" for the bundle's run's
--verify-cost; --preset default bundles) each draft is cut to the length whose expected speedup is
best when verifying a drafted token costs c forward passes (Session.propose(verify_cost=c)), as
the run's draft-length report measured it. Unset: the full drafts, as replay checks them.

Written against vLLM's main branch (the stored snapshot carries no release tag):
vllm/v1/worker/gpu_model_runner.py at 000fc94b754f, vllm/v1/spec_decode/custom_class_proposer.py
at f7490e78408f and vllm/config/speculative.py at 002e77c1f0ef. The `custom_class` method came
with vLLM pull request #39487; vLLM calls it experimental, its interface subject to change.
vLLM imports the class `speculative_config.model` names, builds it with the VllmConfig
(create_custom_proposer) and, after each step's bookkeeping, calls
(GPUModelRunner.propose_draft_token_ids):

    drafter.propose(sampled_token_ids,                # list[list[int]], one list per batch row
                    input_batch.num_tokens_no_spec,   # np.int32 [max_num_reqs]
                    input_batch.token_ids_cpu,        # np.int32 [max_num_reqs, max_model_len]
                    slot_mappings=slot_mappings)      # KV slots (unused here)
    -> list[list[int]]                                # a draft per row, [] for none

Row i is the batch's i-th request this step: token_ids_cpu[i, :num_tokens_no_spec[i]] is its
prompt and every token it has produced, the last len(sampled_token_ids[i]) of them accepted this
step (an empty list is a partial prefill or discarded tokens: no draft, as vLLM's n-gram proposer
does). Requests join and finish, rows move (condense() fills holes from the end; the batch is
reordered), and the call carries no request ids. So a request is known by its history, which is
also all a session's drafts depend on:

- row i belongs to the session whose tokens are row i's tokens before this step's (the same
  count, equal arrays); it is extended with the new tokens and proposes;
- no such session: the request has joined; a session starts with those tokens as its prompt (at
  a request's first sampled token they are exactly its prompt) and is extended;
- two requests with equal histories each take their own session (equal sessions draft alike);
- a session no row takes is parked; one parked for more than `idle_steps` calls is closed: a
  finished request never comes back, one vLLM left unscheduled for a few steps (token budget,
  preemption) finds its session again;
- vLLM skips drafting for a whole step when a request nears max_model_len
  (GPUModelRunner._input_fits_in_drafter): the next call's rows are ahead of their sessions, and
  a session taken in the previous call whose tokens begin a row's catches up with the rest (only
  those, and only one whose last token is not a special token (end of text, end of turn): a
  chat's next turn, whose prompt begins with a finished turn's history, starts its own, even
  when it comes at the next call, as on a server with no other request).

A request whose session was closed while it was away starts again with its whole history as the
prompt, and one whose first tokens came at steps vLLM did not draft for starts with them in its
prompt; their drafts may then differ from those of a session that saw the real prompt (only prompt
autocomplete tells the prompt from the response). Drafts change how many tokens a step verifies,
not what vLLM generates (greedy: the same tokens; sampling: the same distribution). Each draft is cut to num_speculative_tokens and to
max_model_len - num_tokens - 1 tokens (as vLLM's suffix decoding proposer cuts its drafts). A
token id outside the bundle's vocabulary (a model's padded vocabulary) retires that request's
session: its history is still followed, its drafts are [].

vLLM is never imported: the class is plain Python, and vLLM asks only for `propose`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from specdraft.errors import SpecdraftError

# The environment variable naming the bundle: vLLM builds the proposer from its own config only,
# and its worker processes inherit the environment.
BUNDLE_ENV = "SPECDRAFT_BUNDLE"
VERIFY_COST_ENV = "SPECDRAFT_VERIFY_COST"  # drafts cut to the length that pays at that cost
# Calls a session may go untaken before it is closed: vLLM leaves running requests out of a step
# when the token budget is short, and a finished request looks the same until then.
IDLE_STEPS = 64


def load_drafter(path: str | os.PathLike | None = None):
    """The Drafter of the bundle at `path`, or at $SPECDRAFT_BUNDLE."""
    from specdraft.live.drafter import Drafter

    path = path if path is not None else os.environ.get(BUNDLE_ENV)
    if not path:
        raise SpecdraftError(f"set {BUNDLE_ENV} to the drafter bundle `specdraft export` wrote, "
                             "for vLLM's speculative method custom_class to load it")
    return Drafter.load(Path(path))


class SpecdraftProposer:
    """vLLM's custom proposer over a specdraft Drafter: one session per request (module docstring).

    `vllm_config` is vLLM's VllmConfig (only speculative_config.num_speculative_tokens and
    model_config.max_model_len are read); `drafter` defaults to the bundle at $SPECDRAFT_BUNDLE,
    `verify_cost` to $SPECDRAFT_VERIFY_COST (unset: full drafts).
    """

    def __init__(self, vllm_config, drafter=None, idle_steps: int = IDLE_STEPS,
                 verify_cost: float | None = None) -> None:
        self.num_speculative_tokens = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.drafter = drafter if drafter is not None else load_drafter()
        self.verify_cost = (self.drafter.checked_verify_cost(verify_cost) if verify_cost is not None
                            else _verify_cost_from_environment(self.drafter))
        self.idle_steps = idle_steps
        self._calls = 0
        self._by_count: dict[int, list[_Request]] = {}

    def load_model(self, *args, **kwargs) -> None:
        """vLLM calls this with the target model; there is no draft model to load."""

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings=None,
    ) -> list[list[int]]:
        """One draft per batch row (see the module docstring for the arguments)."""
        self._calls += 1
        rows = np.asarray(token_ids_cpu)
        counts = np.asarray(num_tokens_no_spec)
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            n = int(counts[i])
            known = n - len(sampled)
            row = rows[i]
            request = self._take(row, known) or self._take_behind(row, known)
            if request is None and sampled:
                request = _Request(self.drafter, row[:known])
            if request is not None:
                request.seen = self._calls
                request.extend(row[request.count : known].tolist() + [int(t) for t in sampled])
                self._by_count.setdefault(request.count, []).append(request)
            drafts.append(self._draft(request, n) if sampled else [])
        self._close_idle()
        return drafts

    def close(self) -> None:
        """Close every session (vLLM has no shutdown hook for proposers; for callers that do)."""
        for group in self._by_count.values():
            for request in group:
                request.close()
        self._by_count.clear()

    @property
    def num_requests(self) -> int:
        """The requests followed: one session each, parked ones included."""
        return sum(map(len, self._by_count.values()))

    # -- bookkeeping ------------------------------------------------------------------------------
    def _take(self, row: np.ndarray, known: int) -> _Request | None:
        """The request whose history is row[:known], out of the index (so no other row takes it)."""
        group = self._by_count.get(known, ())
        return self._taken(next((r for r in group if _history_matches(r.history(), row, known)), None))

    def _take_behind(self, row: np.ndarray, known: int) -> _Request | None:
        """The request taken in the previous call, and not yet in this one, whose history is the
        longest start of row[:known] (vLLM did not draft at the steps between), out of the index."""
        ended = self.drafter.tokenizer.end_ids  # a turn that ended with one is not behind: it is over
        behind = [r for count, group in self._by_count.items() if 0 < count < known
                  for r in group if r.seen == self._calls - 1 and int(r.history()[-1]) not in ended]
        behind.sort(key=lambda r: -r.count)
        return self._taken(next((r for r in behind if _history_matches(r.history(), row, r.count)), None))

    def _taken(self, request: _Request | None) -> _Request | None:
        if request is not None:
            self._by_count[request.count].remove(request)
        return request

    def _draft(self, request: _Request, n: int) -> list[int]:
        room = min(self.num_speculative_tokens, self.max_model_len - n - 1)
        if room <= 0 or request.session is None:
            return []
        return request.session.propose(verify_cost=self.verify_cost)[:room]

    def _close_idle(self) -> None:
        for count in list(self._by_count):
            group = self._by_count[count]
            for request in [r for r in group if self._calls - r.seen > self.idle_steps]:
                request.close()
                group.remove(request)
            if not group:
                del self._by_count[count]


def _verify_cost_from_environment(drafter) -> float | None:
    from specdraft.integrations import verify_cost_setting

    text = os.environ.get(VERIFY_COST_ENV, "")
    if not text.strip():
        return None
    try:
        return verify_cost_setting(text, drafter)
    except ValueError as exc:
        raise SpecdraftError(f"{VERIFY_COST_ENV}: {exc}") from None


class _Request:
    """One request as the proposer follows it: its history (token ids) and its session."""

    __slots__ = ("_vocab", "count", "seen", "session", "tokens")

    def __init__(self, drafter, prompt: np.ndarray) -> None:
        self._vocab = drafter.vocab_size
        self.tokens = np.empty(max(2 * len(prompt), 64), dtype=np.int32)
        self.tokens[: len(prompt)] = prompt
        self.count = len(prompt)
        self.seen = 0
        self.session = drafter.start(prompt.tolist()) if _in_vocab(prompt, self._vocab) else None

    def history(self) -> np.ndarray:
        return self.tokens[: self.count]

    def extend(self, ids: list[int]) -> None:
        if not ids:
            return
        end = self.count + len(ids)
        if end > len(self.tokens):
            grown = np.empty(2 * end, dtype=np.int32)
            grown[: self.count] = self.history()
            self.tokens = grown
        self.tokens[self.count : end] = ids
        self.count = end
        if self.session is not None:
            if _in_vocab(np.asarray(ids), self._vocab):
                self.session.extend(ids)
            else:
                self.close()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _history_matches(history: np.ndarray, row: np.ndarray, k: int) -> bool:
    """Whether `history` is row[:k] (last token first: rows of other requests differ there
    almost always).

    >>> history = np.array([5, 6])
    >>> _history_matches(history, np.array([5, 6, 7]), 2), _history_matches(history, np.array([5, 7, 6]), 2)
    (True, False)
    """
    if len(history) != k:
        return False
    return k == 0 or bool(history[k - 1] == row[k - 1] and np.array_equal(history, row[:k]))


def _in_vocab(ids: np.ndarray, vocab_size: int) -> bool:
    return ids.size == 0 or (int(ids.min()) >= 0 and int(ids.max()) < vocab_size)
