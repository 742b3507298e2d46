"""The drafter of a recorded run, live: one session per request, drafts proposed as a decoder asks.

    drafter = Drafter.load(DIR)            # a bundle `specdraft export` wrote; memory-mapped
    session = drafter.start(prompt_ids)    # list[int]
    draft = session.propose()              # list[int], at most drafter.draft_len tokens, [] if none
    session.extend(token_ids)              # the tokens the model produced
    drafts = session.propose_many(k)       # the k best distinct drafts, best first
    session.close()                        # online=True: the session's tokens join the store

At each call the session proposes what the warehouse's candidates stage and the run's policy pick
would at the same position, computed for one position from incremental state:

- --preset seed: the same four sources with the same keys, scores and tie-breaks
  (sql/drafters/*.sql, drafters/backoff_walk.py, drafters/autocomplete.py, policy/evaluate.py);
- --preset default: those, the recent copies and the n-gram at every length and rank
  (live/confidence.py) and the arithmetic draft (drafters/arithmetic.py, from the last tokens'
  text), each selectable draft scored by the run's trees (policy/trees.py) from the same integer
  features candidate_features.sql computes.

The state:

- the prefix hashes of the tokens so far (keys.py), so any context's key is O(1);
- for the prefix copy, per copy length, a dict from a context's key to the latest position
  with draft_len known tokens after it, updated as each token arrives (a long prompt's part is
  frozen in sorted arrays at start instead);
- --preset default: per context length, each context's count of earlier places and its latest
  two (confidence.RecentIndex), frozen the same way for a long prompt;
- the current line for prompt autocomplete, decoded from the tokens since the last propose as
  one chunk, as the seed's TextCursor decodes between the positions it visits (--preset seed),
  or the line's tokens decoded whole (--preset default: drafters/autocomplete.py), and the
  prompt's text it looks spans up in (--preset default: the decode of the prompt's tokens);
- the last backoff walk: if the tokens since then are the start of its draft, the new walk is
  the rest of it (each step depends only on the tokens before it), plus the steps it lacks.

extend() costs O(new tokens): each token adds one prefix hash and one key per context length.
A Drafter is shared (immutable but for the online store, which a lock guards); a session belongs
to one request and is used by one thread at a time, so sessions run in parallel threads.
"""

from __future__ import annotations

import math
import numbers
import operator
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import numpy as np

from specdraft.config import MAX_VERIFY_COST
from specdraft.drafters import families
from specdraft.drafters.arithmetic import Arithmetic
from specdraft.drafters.autocomplete import PromptAutocomplete
from specdraft.drafters.backoff_walk import backoff_score
from specdraft.errors import SpecdraftError
from specdraft.live import keys
from specdraft.live.bundle import MANIFEST, Bundle, ConfidenceChoice, read_bundle, read_manifest
from specdraft.live.confidence import (
    ABSENT,
    Candidate,
    KnownTokens,
    OnlineStore,
    RecentIndex,
    feature_rows,
    last_known,
    ngram_all_candidates,
    recent_candidates,
    scoring_indexes,
)
from specdraft.live.tables import ContextTable
from specdraft.policy.confidence import feature_columns
from specdraft.policy.draft_length import best_lengths
from specdraft.policy.draft_trees import TREE_DRAFTS, AcceptanceCurves, TokenTree, best_tree
from specdraft.policy.evaluate import NEAR_TIE

B, M = keys.B, keys.M
ARITHMETIC = families.ORDER["arithmetic"]
COPY, PROMPT, BACKOFF, NGRAM = (families.ORDER[name] for name in families.SEED)
# Above this many (position, copy length) pairs a prompt's copy index is frozen in sorted arrays
# instead of dicts (a 1M-token prompt would otherwise need 11M dict entries).
DICT_LIMIT = 1 << 20
LENGTH_TABLES = 16  # verify costs whose best-length tables a drafter keeps (Drafter.best_lengths)


class Drafter:
    """A recorded run's drafter (see the module docstring)."""

    def __init__(self, bundle: Bundle, tokenizer, online: bool | None = None) -> None:
        self.bundle = bundle
        self.tokenizer = tokenizer
        cfg = bundle.config
        self.config = cfg
        self.policy = bundle.policy
        self.draft_len = cfg.draft_len
        self.verify_cost = cfg.verify_cost  # the run's --verify-cost: propose(verify_cost=drafter.verify_cost)
        self._best_lengths: dict[float, tuple[np.ndarray, list[float]]] = {}  # by verify cost
        self.vocab_size = int(bundle.manifest["tokenizer"]["vocab_size"])
        self.run_id = bundle.manifest["run_id"]
        # (ctx_len, B^ctx_len mod M), longest first: the order the sources try them in
        self.copy_lengths = [(n, keys.power(n)) for n in sorted(cfg.copy_context_lengths, reverse=True)]
        self.ngram_lengths = [(n, keys.power(n)) for n in sorted(cfg.context_lengths, reverse=True)]
        self.backoff_lengths = [(n, keys.power(n)) for n in sorted(cfg.effective_backoff_lengths, reverse=True)]
        self.backoff_width = max((n for n, _ in self.backoff_lengths), default=0)
        self.ngram_plan = bundle.ngram.plan(self.ngram_lengths)
        self.backoff_plan = bundle.backoff.plan(self.backoff_lengths)
        self.backoff_place = {ctx_len: i for i, (ctx_len, *_) in enumerate(self.backoff_plan)}  # longest first
        self.choices: frozenset[int] | None = None  # --preset default: the families it may choose
        self.scored: frozenset[int] | None = None  # and the families that branch its token trees
        self.feature_width = 0  # and how many feature columns its trees read
        self.chain: frozenset[int] = frozenset()  # and the families after whose pick it chooses again
        if isinstance(self.policy, ConfidenceChoice):
            features, columns = list(self.policy.features), list(feature_columns())
            # a bundle from before the last features were added reads the ones before them
            if features != columns[: len(features)]:
                raise SpecdraftError(f"{bundle.root / 'policy.json'}: the model reads features {features}; "
                                     f"this specdraft computes {columns}")
            self.feature_width = len(features)
            self.choices = frozenset(families.ORDER[name] for name in self.policy.choices)
            self.scored = frozenset(families.ORDER[name] for name in self.policy.scored)
            self.chain = frozenset(families.ORDER[name] for name in self.policy.chain)
            # the lengths the warehouse keys (query_context_keys.sql): n-gram and copy lengths
            self.recent_lengths = [(n, keys.power(n)) for n in sorted(set(cfg.context_lengths)
                                                                      | set(cfg.copy_context_lengths))]
            # where each copy length (longest first) sits among the recent lengths
            slot = {n: i for i, (n, _) in enumerate(self.recent_lengths)}
            self.copy_slots = [slot[n] for n, _ in self.copy_lengths]
            rank1 = {n: (offset, shift) for n, _, offset, shift in self.ngram_plan}
            # the rank-2 continuations, where the run proposed them (bundle.proposed_families)
            rank2 = {} if bundle.ngram_rank2 is None else {
                n: (offset, shift) for n, _, offset, shift in bundle.ngram_rank2.plan(self.ngram_lengths)}
            self.ngram_all_plan = [(n, power, rank1[n], rank2.get(n)) for n, power in reversed(self.ngram_lengths)
                                   if n in rank1]
        # drafters/arithmetic.py, where the policy scores its drafts (a bundle from before it does not)
        self.arithmetic = Arithmetic(tokenizer, self.draft_len) if ARITHMETIC in (self.scored or ()) else None
        if online is None:
            online = cfg.online
        if online and not cfg.online:
            raise SpecdraftError(f"{bundle.root / 'config.json'}: online=True needs the bundle of an --online run "
                                 "(its policy was fitted with the online source); export one")
        self.online = bool(online)
        self.online_store = OnlineStore(self.recent_lengths) if self.online else None

    def checked_verify_cost(self, verify_cost) -> float:
        """verify_cost as propose(verify_cost=) takes it, checked before any session needs it (an
        integration's setting): a number from 0 to MAX_VERIFY_COST, on a bundle that can cut its
        drafts (--preset default's acceptance curves); a ValueError otherwise."""
        cost = checked_verify_cost(verify_cost)
        self.acceptance_curves()
        return cost

    def best_lengths(self, verify_cost) -> tuple[np.ndarray, list[float]]:
        """At verify_cost (checked as checked_verify_cost does), the table of the length to draft
        per bin of the raw prediction and draft length (draft_length.best_lengths: what the run's
        adaptive rows cut to), and the bins' edges; made once per cost."""
        cost = self.checked_verify_cost(verify_cost)
        made = self._best_lengths.get(cost)
        if made is None:
            if len(self._best_lengths) >= LENGTH_TABLES:
                self._best_lengths.clear()
            curves = self.acceptance_curves()
            made = self._best_lengths[cost] = (best_lengths(curves, cost), curves.edges.tolist())
        return made

    def acceptance_curves(self) -> AcceptanceCurves:
        """How far the policy's drafts scored alike were accepted: what draft lengths and token
        trees are chosen from (--preset default); a ValueError for a bundle without them."""
        confident = isinstance(self.policy, ConfidenceChoice)
        curves = self.policy.curves if confident else None
        if curves is None:
            raise ValueError("token trees and draft lengths need a --preset default bundle whose run recorded "
                             "acceptance curves; this one's run came before them: run it again and export it"
                             if confident else "token trees and draft lengths need a --preset default bundle; "
                             f"this one's run used --preset {self.config.preset}")
        return curves

    def forget(self) -> None:
        """Empty the online store (online=True): later sessions draft as if none had closed."""
        if self.online:
            self.online_store = OnlineStore(self.recent_lengths)

    @classmethod
    def load(cls, path: str | Path, online: bool | None = None) -> Drafter:
        """Open a bundle: checks its format version, checksums and tokenizer (loaded offline by the
        name it records, its fingerprint compared); one line naming the file if anything is off.
        The tokenizer loads in a second thread while the files are checksummed (hashing releases
        the GIL).

        online: each closed session's tokens join a store later sessions draft from, as an --online
        run measured it; by default on for an --online run's bundle, and only for one."""
        from concurrent.futures import ThreadPoolExecutor

        if online is not None and not isinstance(online, bool):  # ("no" would switch it on)
            raise ValueError(f"online must be True, False or None, not {online!r}")
        path = Path(path)
        recorded = read_manifest(path)["tokenizer"]
        with ThreadPoolExecutor(max_workers=1) as pool:
            loading = pool.submit(_tokenizer, recorded, path)
            bundle = read_bundle(path)
            tokenizer = loading.result()
        if tokenizer.fingerprint != recorded["fingerprint"] or tokenizer.vocab_size != recorded["vocab_size"]:
            raise SpecdraftError(
                f"{path / MANIFEST}: made with tokenizer {recorded['name']} (fingerprint "
                f"{recorded['fingerprint']}, {recorded['vocab_size']} ids); {recorded['name']} loads here as "
                f"fingerprint {tokenizer.fingerprint} with {tokenizer.vocab_size} ids"
            )
        return cls(bundle, tokenizer, online)

    def start(self, prompt_ids: list[int], prompt_text: str | None = None) -> Session:
        """A session for one request whose prompt is `prompt_ids` (may be empty). prompt_text:
        the prompt as text, where the caller has it. Prompt autocomplete looks spans up in it
        under --preset seed, as the seed's runs look them up in the dataset's text (without it,
        in the decode of prompt_ids, which differs where the tokenizer normalises the text, as
        Qwen's NFC does). --preset default's runs read the decode, and so do its sessions."""
        if prompt_text is not None and not isinstance(prompt_text, str):
            raise ValueError(f"prompt_text must be a str or None, not {type(prompt_text).__name__}")
        return Session(self, self.checked(prompt_ids, "prompt_ids"), prompt_text)

    def checked(self, ids, what: str) -> list[int]:
        """`ids` if it is a list of ints in the vocabulary, else a ValueError saying which."""
        if type(ids) is not list:
            raise ValueError(f"{what} must be a list of token ids (ints), not {type(ids).__name__}")
        vocab = self.vocab_size
        for i, token in enumerate(ids):
            if type(token) is not int or not 0 <= token < vocab:
                shown = f"{type(token).__name__} {token!r}" if type(token) is not int else f"{token}"
                raise ValueError(f"{what}[{i}] is {shown}: token ids are ints from 0 to {vocab - 1} "
                                 f"(the {self.tokenizer.name} vocabulary)")
        return ids


def chained_draft(pick: list[int], after: list[int], draft_len: int) -> list[int]:
    """The draft of a pick that chooses again past its first token (ConfidencePolicy.chain): the
    pick's first token, the choice `after` it, and where that is shorter, the pick's own tokens
    after it (evaluate.chained_acceptance).

    >>> chained_draft([1, 2, 3, 4], [7, 8], 4)
    [1, 7, 8, 4]
    """
    tail = after[: draft_len - 1]
    return [pick[0], *tail, *pick[1 + len(tail) :]]


class Session:
    """One request's drafting state (see the module docstring). Not for two threads at once."""

    def __init__(self, drafter: Drafter, prompt_ids: list[int], prompt_text: str | None = None) -> None:
        self.drafter = drafter
        self.tokens = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self._prefix = keys.prefix_hashes(self.tokens)
        self._known = KnownTokens(self.tokens) if drafter.choices is not None else None
        self._copy, self._frozen, self._frozen_pos = self._copy_index()
        tokenizer = drafter.tokenizer
        self._autocomplete = PromptAutocomplete(tokenizer, prompt_text, self.tokens, self.prompt_len,
                                                drafter.draft_len, drafter.policy.text_from_tokens)
        self._walk: tuple | None = None  # (n, draft, steps, stopped) of the last backoff walk
        self._recent = self._recent_index() if drafter.choices is not None else None
        # --preset default: position -> its context keys per recent length, until the copy index takes them
        self._pending_keys: dict[int, list[int]] | None = {} if self._recent is not None else None
        self._closed = False

    # -- the calls ------------------------------------------------------------------------------
    def extend(self, token_ids: list[int]) -> None:
        """Add the tokens the model produced. O(len(token_ids))."""
        self._check_open()
        ids = self.drafter.checked(token_ids, "token_ids")
        if self._known is not None:
            self._known.add(ids)
        self._add(ids)

    def _add(self, ids: list[int], journal: list | None = None) -> None:
        """extend's work on the indexes. journal: each (dict, key, what it held or ABSENT) it
        overwrites is appended there, for _assuming to put back."""
        tokens, prefix, copy, recent = self.tokens, self._prefix, self._copy, self._recent
        draft_len = self.drafter.draft_len
        pending = self._pending_keys
        for token in ids:
            if recent is not None:
                # the current position becomes an earlier place; its keys are kept until it joins
                # the copy index, draft_len tokens later (the copy lengths are among the recent ones)
                pending[len(tokens)] = recent.add(prefix, len(tokens), journal)
                if journal is not None:
                    journal.append((pending, len(tokens), ABSENT))
            tokens.append(token)
            prefix.append((prefix[-1] * B + token + 1) % M)
            # the position that now has draft_len known tokens after it joins the copy index
            at = len(tokens) - draft_len
            if at > 0:
                known = pending.pop(at, None) if pending is not None else None
                if known is not None:
                    if journal is not None:
                        journal.append((pending, at, known))
                    for (ctx_len, _, latest), slot in zip(copy, self.drafter.copy_slots):
                        if ctx_len <= at:
                            if journal is not None:
                                journal.append((latest, known[slot], latest.get(known[slot], ABSENT)))
                            latest[known[slot]] = at
                    continue
                end = prefix[at]
                for ctx_len, power, latest in copy:
                    if ctx_len <= at:
                        key = (end - prefix[at - ctx_len] * power) % M
                        if journal is not None:
                            journal.append((latest, key, latest.get(key, ABSENT)))
                        latest[key] = at

    @contextmanager
    def _assuming(self, token: int):
        """The session as if `token` had been written after its known text, and as it was again
        after the block: every index entry the token's step overwrote is put back, and the known
        tokens, the cached backoff walk and prompt autocomplete's line are restored."""
        known, autocomplete = self._known, self._autocomplete
        saved_known, saved_line = known.state_of(token), autocomplete.line_state()
        saved_walk, n = self._walk, len(self.tokens)
        journal: list = []
        try:
            known.add([token])
            self._add([token], journal)
            yield
        finally:
            for entries, key, held in reversed(journal):
                if held is ABSENT:
                    entries.pop(key, None)
                else:
                    entries[key] = held
            del self.tokens[n:], self._prefix[n + 1 :]
            known.restore(token, saved_known)
            autocomplete.restore_line_state(saved_line)
            self._walk = saved_walk

    def propose(self, verify_cost: float | None = None) -> list[int]:
        """The policy's draft at the current position: at most draft_len tokens, [] if none.

        verify_cost=c (a drafted token's verify cost, relative to a decode step) cuts it to the
        length of the best expected speedup (1 + accepted) / (1 + c * drafted), as the run's
        draft_length "adaptive" rows (policy/draft_length.py; --preset default only). Without it,
        the full draft: the every-position one, which replay checks."""
        self._check_open()
        # the argument, and that the bundle can cut drafts, checked at every call: not only where
        # there is a draft to cut
        lengths = None if verify_cost is None else self.drafter.best_lengths(verify_cost)
        pick, score = self._pick(first=True)
        if pick is None:
            return []
        draft = list(pick.draft)
        draft_len = self.drafter.draft_len
        if len(draft) == draft_len and pick.order in self.drafter.chain:
            # its first token, then the choice after it (ConfidencePolicy.chain), then where that is
            # shorter the pick's own tokens after it (evaluate.chained_acceptance)
            with self._assuming(draft[0]):
                after, _ = self._pick()
            draft = chained_draft(draft, [] if after is None else list(after.draft), draft_len)
        if lengths is None:
            return draft
        table, edges = lengths
        return draft[: int(table[bisect_right(edges, score), min(len(draft), table.shape[1] - 1)])]

    def _pick(self, first: bool = False) -> tuple[Candidate | None, float | None]:
        """The policy's choice at the current position and its score; (None, None) if none.
        first: the first choice there, where the chain model scores the chain families' drafts
        (ConfidencePolicy.scores); else the choice after a chained token."""
        candidates = self._candidates()
        picked, scores = self._scores(candidates, first=first)
        if not picked:
            return None, None
        best = first_best(scores)
        return candidates[picked[best]], scores[best]

    def propose_many(self, k: int) -> list[list[int]]:
        """The k best distinct drafts at the current position, best first (ties in family order)."""
        self._check_open()
        return [draft for draft, _ in self._best_distinct(positive_count("k", k))]

    def propose_tree(self, budget: int) -> TokenTree:
        """A token tree of at most `budget` tokens for a tree verifier: the likeliest nodes of the
        prefix tree of the TREE_DRAFTS best distinct drafts (policy/draft_trees.py), as
        token_ids and parent indexes (-1: the node follows the known text), every parent before
        its children. The run's tree_b<budget> figures are these trees'. --preset default only."""
        self._check_open()
        budget = positive_count("budget", budget)
        best = self._best_distinct(TREE_DRAFTS)
        return best_tree(self.drafter.acceptance_curves(), [draft for draft, _ in best], [score for _, score in best], budget)

    def _best_distinct(self, k: int) -> list[tuple[list[int], float]]:
        """The k best distinct drafts and their scores, best first (ties in family order; of a
        draft proposed twice, its best-scored copy), among the choices and evidence drafts."""
        candidates = self._candidates()
        picked, scores = self._scores(candidates, trees=True)
        order = sorted(range(len(picked)), key=lambda i: (-scores[i], i))
        best: list[tuple[list[int], float]] = []
        for i in order:
            draft = list(candidates[picked[i]].draft)
            if all(draft != seen for seen, _ in best):
                best.append((draft, scores[i]))
                if len(best) == k:
                    break
        return best

    def close(self) -> None:
        """End the request; the session's state is released. With online=True its tokens join
        the drafter's online store (once)."""
        if self._closed:
            return
        store = self.drafter.online_store
        if store is not None:
            store.add(self.tokens, self._prefix)
        self._closed = True
        self._copy, self._frozen, self._walk, self._recent, self._pending_keys = [], None, None, None, None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the session is closed")

    # -- the sources ----------------------------------------------------------------------------
    def _candidates(self) -> list[Candidate]:
        """Each source's draft at the current position, in the order ties are broken in
        (eval_features.sql's: family order, then context length), as the sources give them: the
        seed's four in family order; --preset default adds recent copies and the n-gram at every
        length (confidence.py)."""
        seed = [candidate for candidate in (self._copy_candidate(), self._prompt_candidate(),
                                            self._backoff_candidate()) if candidate is not None]
        if self._recent is None:
            ngram = self._ngram_candidate()
            return seed if ngram is None else [*seed, ngram]
        drafter = self.drafter
        rank1, rank2 = ngram_all_candidates(drafter, self._prefix, len(self.tokens))
        if rank1:  # the seed's n-gram: ngram-all's draft at the longest length
            longest = rank1[-1]
            seed.append(Candidate(NGRAM, longest.ctx_len, longest.count, 0, longest.draft))
        out = seed + recent_candidates(self._recent, self.tokens, self._prefix, drafter.draft_len) + rank1 + rank2
        store = drafter.online_store
        if store is not None:
            out += store.candidates(self._prefix, len(self.tokens), drafter.draft_len)
        if drafter.arithmetic is not None:
            draft = drafter.arithmetic.propose(self.tokens, len(self.tokens))
            if draft is not None:
                out.append(Candidate(ARITHMETIC, 0, 0, 0, list(draft), "arithmetic"))
        return out

    def _scores(self, candidates: list[Candidate], trees: bool = False, first: bool = False) -> tuple[list[int], list[float]]:
        """The candidates the policy may choose (their indexes) and its score of each; trees=True:
        those that branch token trees and multi-draft proposals (the choices and evidence drafts);
        first=True: the first choice's scores, the chain model's for the chain families' drafts."""
        drafter = self.drafter
        if drafter.choices is None:
            return list(range(len(candidates))), policy_scores(candidates, drafter.policy)
        families = drafter.scored if trees else drafter.choices
        picked = [i for i, c in enumerate(candidates) if c.order in families]
        if not picked:
            return [], []
        model = drafter.policy.trees
        if not drafter.policy.per_draft:  # a bundle of a run before scoring per draft
            return picked, model.raw_predict_checked(self._features(candidates, picked)).tolist()
        scorers = scoring_indexes(candidates, picked, drafter.choices)
        own = sorted(set(scorers))
        matrix = self._features(candidates, own)
        chain_model = drafter.policy.chain_trees if first else None
        if chain_model is None:
            values = model.raw_predict_checked(matrix)
        else:
            by_chain = np.array([candidates[i].order in drafter.chain for i in own])
            values = np.empty(len(own))
            for scorer_model, rows in ((model, ~by_chain), (chain_model, by_chain)):
                if rows.any():
                    values[rows] = scorer_model.raw_predict_checked(matrix[rows])
        raw = dict(zip(own, values.tolist()))
        return picked, [raw[scorer] for scorer in scorers]

    def _features(self, candidates: list[Candidate], rows: list[int]) -> np.ndarray:
        """The feature rows of candidates[rows], as many columns as the bundle's model reads."""
        matrix = feature_rows(candidates, len(self.tokens) - self.prompt_len, last_known(self.tokens), rows,
                              self._known)
        return matrix[:, : self.drafter.feature_width]

    def _copy_candidate(self):
        """sql/drafters/copy_candidates.sql, over context_occurrences.sql's copy_match_pos: the
        longest copy length whose last tokens occurred earlier with draft_len known tokens after;
        its latest such place."""
        tokens, prefix = self.tokens, self._prefix
        n = len(tokens)
        end = prefix[n]
        frozen = self._frozen
        for ctx_len, power, latest in self._copy:
            if ctx_len > n:
                continue
            key = (end - prefix[n - ctx_len] * power) % M
            at = latest.get(key)
            if at is None and frozen is not None:
                row = frozen.find(ctx_len, key)
                at = self._frozen_pos[row] if row >= 0 else None
            if at is not None:
                return Candidate(COPY, ctx_len, 0, n - at, tokens[at : at + self.drafter.draft_len],
                                 f"copy:{ctx_len}", ctx_len * 9.0 + 0.5)
        return None

    def _prompt_candidate(self):
        """drafters/autocomplete.py: the line decoded from the tokens since the last propose, or whole."""
        autocomplete = self._autocomplete
        proposal = autocomplete.propose(autocomplete.line_at(len(self.tokens) - self.prompt_len))
        if proposal is None:
            return None
        draft, score = proposal
        return Candidate(PROMPT, 0, 0, 0, list(draft), "prompt-autocomplete", score)

    def _ngram_candidate(self):
        """sql/drafters/ngram_candidates.sql: the longest context length seen in train, its
        rank-1 continuation; the raw score adds log1p(count) (policy/evaluate.py)."""
        drafter = self.drafter
        bundle = drafter.bundle
        table = bundle.ngram
        prefix = self._prefix
        n = len(self.tokens)
        end = prefix[n]
        for ctx_len, power, offset, shift in drafter.ngram_plan:
            if ctx_len > n:
                continue
            row = table.row(offset, shift, (end - prefix[n - ctx_len] * power) % M)
            if row >= 0:
                count = bundle.ngram_count[row]
                at = bundle.ngram_store_pos[row]
                draft = bundle.store[at : at + drafter.draft_len].tolist()
                return Candidate(NGRAM, ctx_len, count, 0, draft, f"ngram:{ctx_len}",
                                 ctx_len * 8.0 + math.log1p(count))
        return None

    def _backoff_candidate(self):
        """drafters/backoff_walk.py: draft_len greedy steps, each the pick of the longest backoff
        context of (known tokens + draft so far) in the table, stopping at the first miss."""
        draft, steps = self._backoff_walk()
        if not steps:
            return None
        if self._recent is not None:  # --preset default: the trees score it, not its raw score
            return Candidate(BACKOFF, steps[0][0], 0, 0, draft)
        return Candidate(BACKOFF, steps[0][0], 0, 0, draft, f"backoff:{steps[0][0]}", backoff_raw(steps), steps)

    def _backoff_walk(self) -> tuple[list[int], list[tuple[int, int, int]]]:
        drafter = self.drafter
        tokens = self.tokens
        n = len(tokens)
        draft_len = drafter.draft_len
        draft: list[int] = []
        steps: list[tuple[int, int, int]] = []
        stopped = False
        plan = drafter.backoff_plan
        # A step can only hit up to one length above the previous step's hit: a context of length
        # l found in train at position q means its first l - 1 tokens, the previous step's context,
        # were found at q - 1 (indexed too: positions are indexed in order), so the previous step
        # hit at the longest length below l at least (and if it missed, no length has one below
        # l: l is the shortest). The first step's previous step is the walk one token back.
        # Longer probes would miss; skipping them changes no walk (but one a hash collision would
        # make hit).
        first = 0  # the longest length to probe, as a place in plan
        if self._walk is not None:
            at, last_draft, last_steps, last_stopped = self._walk
            ahead = n - at
            if 0 <= ahead <= len(last_draft) and tokens[at:n] == last_draft[:ahead]:
                draft, steps, stopped = last_draft[ahead:], last_steps[ahead:], last_stopped
            elif ahead == 1 and (last_steps or last_stopped):
                first = max(drafter.backoff_place[last_steps[0][0]] - 1, 0) if last_steps else len(plan) - 1
        if not stopped and len(draft) < draft_len and plan:
            bundle = drafter.bundle
            picks, counts, totals = bundle.backoff_token, bundle.backoff_count, bundle.backoff_total
            table_keys, directory = bundle.backoff.keys, bundle.backoff.directory  # ContextTable.row, inlined
            # prefix hashes of the last backoff_width known tokens, then of the draft so far
            hashes = self._prefix[max(0, n - drafter.backoff_width) :]
            for token in draft:
                hashes.append((hashes[-1] * B + token + 1) % M)
            draft, steps = list(draft), list(steps)
            if steps:
                first = max(drafter.backoff_place[steps[-1][0]] - 1, 0)
            while len(draft) < draft_len:
                known = n + len(draft)
                end = len(hashes) - 1
                last = hashes[end]
                for i in range(first, len(plan)):
                    ctx_len, power, offset, shift = plan[i]
                    if ctx_len <= known:
                        key = (last - hashes[end - ctx_len] * power) % M
                        bucket = offset + (key >> shift)
                        stop = directory[bucket + 1]
                        row = bisect_left(table_keys, key, directory[bucket], stop)
                        if row < stop and table_keys[row] == key:
                            first = max(i - 1, 0)
                            break
                else:
                    stopped = True
                    break
                token = picks[row]
                draft.append(token)
                steps.append((ctx_len, counts[row], totals[row]))
                hashes.append((last * B + token + 1) % M)
        self._walk = (n, draft, steps, stopped)
        return draft, steps

    def _recent_index(self) -> RecentIndex:
        """The recent-copy index of the prompt's positions (frozen arrays for a long prompt)."""
        index = RecentIndex(self.drafter.recent_lengths)
        n = self.prompt_len
        if sum(max(0, n - ctx_len) for ctx_len, _ in index.lengths) <= DICT_LIMIT:
            index.add_many(self._prefix, 0, n)
        else:
            index.freeze(self._prefix, n)
        return index

    # -- the copy index of the prompt -----------------------------------------------------------
    def _copy_index(self):
        """Per copy length (longest first): (ctx_len, B^ctx_len, {key: latest position}) holding
        the prompt's positions with draft_len tokens after them, or, for a long prompt, empty dicts
        and the prompt's part frozen in a ContextTable (keys -> latest position)."""
        drafter = self.drafter
        copy = [(ctx_len, power, {}) for ctx_len, power in drafter.copy_lengths]
        last = self.prompt_len - drafter.draft_len  # the last position with draft_len tokens after
        pairs = sum(max(0, last - ctx_len + 1) for ctx_len, _, _ in copy)
        if pairs == 0:
            return copy, None, None
        residues = keys.residues(self._prefix)
        if pairs <= DICT_LIMIT:
            for ctx_len, _, latest in copy:
                if ctx_len <= last:
                    ends = np.arange(ctx_len, last + 1)
                    # in position order, so each key keeps its latest position
                    latest.update(zip(keys.window_keys(residues, ends, ctx_len).tolist(), ends.tolist()))
            return copy, None, None
        frozen_keys, frozen_pos, segments = [], [], []
        start = 0
        for ctx_len, _, _ in copy:
            if ctx_len <= last:
                ends = np.arange(ctx_len, last + 1)
                found = keys.window_keys(residues, ends, ctx_len)
                order = np.argsort(found)
                found, ends = found[order], ends[order]
                firsts = np.flatnonzero(np.r_[True, found[1:] != found[:-1]])
                frozen_keys.append(found[firsts])
                frozen_pos.append(np.maximum.reduceat(ends, firsts))  # each key's latest position
                segments.append((ctx_len, start, start + len(frozen_keys[-1])))
                start = segments[-1][2]
        table = ContextTable(np.concatenate(frozen_keys), segments)
        return copy, table, memoryview(np.concatenate(frozen_pos))


def _tokenizer(recorded: dict, root: Path):
    """The tokenizer a bundle names (or carries: bundle.TOKENIZER_DIR), with its fingerprint
    computed (both are cached per process)."""
    from specdraft.sources.tokenizer import load_tokenizer

    bundled = recorded.get("bundled")
    tokenizer = load_tokenizer(str(root / bundled) if bundled else recorded["name"])
    _ = tokenizer.fingerprint  # computed here, in the loading thread
    return tokenizer


# -- the policy ---------------------------------------------------------------------------------

def policy_scores(candidates: list[Candidate], policy) -> list[float]:
    """SourceAveragePolicy's score of each candidate, with policy/evaluate.py's float operations;
    where scores are within rounding of a tie, the backoff candidate's exact score
    (evaluate._resolve_near_ties)."""
    if not candidates:
        return []
    scores = [policy.score_one(c.source, c.raw) for c in candidates]
    best = max(scores)
    tolerance = NEAR_TIE * max(abs(best), 1.0)
    close = [abs(score - best) <= tolerance for score in scores]
    if sum(close) > 1:
        for i, c in enumerate(candidates):
            if c.order == BACKOFF and close[i]:
                scores[i] = policy.score_one(c.source, backoff_score(*map(list, zip(*c.steps))))
    return scores


def backoff_raw(steps: list[tuple[int, int, int]]) -> float:
    """The backoff walk's float score, mean(lengths) * 5.5 + mean(count / total) * 8.0, as the
    batch walk computes it (backoff_walk._as_table) but for the last bit (numpy sums in another
    order): a pick it could change is a near tie, and there both sides use the exact score.

    >>> backoff_raw([(8, 1, 2), (4, 3, 4)])
    38.0
    """
    mean_len = sum(step[0] for step in steps) / len(steps)
    confidence = 0.0
    for _, count, total in steps:
        confidence += count / total
    return mean_len * 5.5 + confidence / len(steps) * 8.0


def first_best(scores: list[float]) -> int:
    """The index of the first highest score (runs.best_in_runs: Python's max keeps the first, and
    index finds the first equal to it; scores are never NaN).

    >>> first_best([1.0, 3.0, 3.0, 2.0])
    1
    """
    return scores.index(max(scores))


def checked_verify_cost(value) -> float:
    """A drafted token's verify cost as propose takes it: a real number (numpy's too, not a bool)
    from 0 to MAX_VERIFY_COST, as --verify-cost.

    >>> checked_verify_cost(np.float32(0.5))
    0.5
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real) \
            or not 0 <= float(value) <= MAX_VERIFY_COST:
        raise ValueError(f"verify_cost must be a number from 0 to {MAX_VERIFY_COST}, not {value!r}")
    return float(value)


def positive_count(name: str, value) -> int:
    """An int of at least 1 (numpy's too, not a bool), or a ValueError naming the argument.

    >>> positive_count("k", np.int64(4))
    4
    """
    count = None
    if not isinstance(value, bool | np.bool_):
        try:
            count = operator.index(value)
        except TypeError:
            pass
    if count is None or count < 1:
        raise ValueError(f"{name} must be a positive int, not {value!r}")
    return count
