"""--preset default, live: the sources beyond the seed and the confidence model's choice, for one
position of one session.

The candidates stage builds, per position, every family's drafts (sql/drafters/*.sql); the
confidence policy scores each selectable draft from features of the whole set
(candidate_features.sql) and picks the first highest in (family order, context length) order
(eval_features.sql, runs.best_in_runs). Here the same drafts, features and order come from a
session's incremental state:

- recent copy: per context length, each context's count of earlier places in the session and its
  latest two (RecentIndex), updated as tokens arrive;
- ngram-all (and, from a run that proposed them, ngram-rank2): the bundle's rank-1 (and rank-2)
  continuations at every context length that hits;
- online (Drafter.load(DIR, online=True), an --online run's bundle): the latest place, in a session
  closed earlier, with the same context (OnlineStore).

The features are integers computed exactly as the SQL does (its window functions become counters
over the drafts at the position), so the trees (policy/trees.py) see the same rows.

Lengths are probed shortest first, and the first that misses ends the probing: a longer context
that occurred (in the session, in train at an indexed position, in a closed session) ends in the
shorter one at the same place, which therefore occurred too. The SQL joins every length; the two
differ only where a hash collision makes a longer key match a context that never occurred, as
likely as two 62-bit keys colliding among the ones probed (about 1e-5 over a whole replay).
"""

from __future__ import annotations

import threading
from bisect import bisect_left

import numpy as np

from specdraft.drafters import families
from specdraft.live import keys
from specdraft.live.tables import ContextTable
from specdraft.policy.confidence import UNSEEN_DISTANCE, feature_columns

M = keys.M
RECENT, RECENT_2, NGRAM_ALL, NGRAM_RANK2 = (
    families.ORDER[name] for name in ("recent-copy", "recent-copy-2", "ngram-all", "ngram-rank2"))
COPY, NGRAM, ONLINE = families.ORDER["copy"], families.ORDER["ngram"], families.ORDER["online"]
NO_PLACE = -1
# a journal's mark for a dict key that was not there (Session._assuming deletes it again)
ABSENT = object()
WIDTH = len(feature_columns())  # the columns of a feature row


class Candidate:
    """One draft at a position, with what the features read of it (the columns of
    sql/drafters/candidates.sql); `steps` is the backoff walk's, for the seed policy's near ties."""

    __slots__ = ("count", "ctx_len", "distance", "draft", "order", "raw", "source", "steps")

    def __init__(self, order: int, ctx_len: int, count: int, distance: int, draft: list[int],
                 source: str = "", raw: float = 0.0, steps=None) -> None:
        self.order, self.ctx_len, self.count, self.distance = order, ctx_len, count, distance
        self.draft, self.source, self.raw, self.steps = draft, source, raw, steps


class RecentIndex:
    """Per context length (each length the warehouse keys: n-gram and copy lengths), context key
    -> (earlier places, latest place, second-latest place) over the session's positions before the
    current one, as context_occurrences.sql's lag() and row_number() see them.

    Positions are added in order (add()); a long prompt's part can be frozen in sorted arrays
    instead of dicts (freeze())."""

    def __init__(self, lengths: list[tuple[int, int]]) -> None:
        self.lengths = lengths  # (ctx_len, B^ctx_len mod M), ascending
        self.places: list[dict[int, tuple[int, int, int]]] = [{} for _ in lengths]
        self._by_length = [(ctx_len, power, places) for (ctx_len, power), places in zip(lengths, self.places)]
        self.frozen: ContextTable | None = None
        self.frozen_rows: tuple[memoryview, memoryview, memoryview] | None = None

    def add(self, prefix: list[int], pos: int, journal: list | None = None) -> list[int]:
        """Index position `pos` (its context is tokens[pos - ctx_len:pos]); O(lengths). Returns
        the keys, one per length up to pos. journal: each (places, key, what it held or ABSENT)
        it overwrites is appended there."""
        end = prefix[pos]
        found = []
        for ctx_len, power, places in self._by_length:
            if ctx_len > pos:
                break
            key = (end - prefix[pos - ctx_len] * power) % M
            found.append(key)
            seen = places.get(key)
            if journal is not None:
                journal.append((places, key, ABSENT if seen is None else seen))
            places[key] = (1, pos, NO_PLACE) if seen is None else (seen[0] + 1, pos, seen[1])
        return found

    def add_many(self, prefix: list[int], start: int, stop: int) -> None:
        """Index positions start .. stop - 1 in order (a prompt's), with numpy keys."""
        residues = keys.residues(prefix)
        for (ctx_len, _), places in zip(self.lengths, self.places):
            first = max(start, ctx_len)
            if first >= stop:
                continue
            ends = np.arange(first, stop)
            for key, pos in zip(keys.window_keys(residues, ends, ctx_len).tolist(), ends.tolist()):
                seen = places.get(key)
                places[key] = (1, pos, NO_PLACE) if seen is None else (seen[0] + 1, pos, seen[1])

    def freeze(self, prefix: list[int], stop: int) -> None:
        """Index positions before `stop` into sorted arrays (for a long prompt): per length, each
        key's count, latest and second-latest place."""
        residues = keys.residues(prefix)
        all_keys, counts, latest, second, segments = [], [], [], [], []
        start = 0
        for ctx_len, _ in self.lengths:
            if ctx_len >= stop:
                continue
            ends = np.arange(ctx_len, stop)
            found = keys.window_keys(residues, ends, ctx_len)
            order = np.argsort(found, kind="stable")  # places in position order within each key
            found, ends = found[order], ends[order]
            firsts = np.flatnonzero(np.r_[True, found[1:] != found[:-1]])
            lasts = np.r_[firsts[1:], len(found)] - 1
            all_keys.append(found[firsts])
            counts.append(lasts - firsts + 1)
            latest.append(ends[lasts])
            second.append(np.where(lasts > firsts, ends[np.maximum(lasts - 1, 0)], NO_PLACE))
            segments.append((ctx_len, start, start + len(firsts)))
            start += len(firsts)
        if segments:
            self.frozen = ContextTable(np.concatenate(all_keys), segments)
            self.frozen_rows = tuple(memoryview(np.concatenate(part).astype(np.int64))
                                     for part in (counts, latest, second))

    def find(self, i: int, key: int) -> tuple[int, int, int] | None:
        """(count, latest, second) of `key` at the i-th length, or None if it never occurred."""
        seen = self.places[i].get(key)
        if self.frozen is None:
            return seen
        row = self.frozen.find(self.lengths[i][0], key)
        if row < 0:
            return seen
        count, latest, second = (column[row] for column in self.frozen_rows)
        if seen is None:
            return count, latest, second
        # the dict holds later places than the frozen prompt
        return count + seen[0], seen[1], seen[2] if seen[2] != NO_PLACE else latest


class OnlineStore:
    """The online scenario's store (online_candidates.sql): the token lists of the sessions closed
    so far, in the order they closed, and per context length, context key -> the latest place
    among them (trace index << 32 | position), as the SQL's max(trace_id * 2^32 + pos) over earlier
    traces. A closing session's positions are written under a lock, in order, so later places
    overwrite earlier ones; proposing sessions only read (dict lookups are atomic)."""

    def __init__(self, lengths: list[tuple[int, int]]) -> None:
        self.lengths = lengths
        self.places: list[dict[int, int]] = [{} for _ in lengths]
        self.traces: list[list[int]] = []
        self.lock = threading.Lock()

    def add(self, tokens: list[int], prefix: list[int]) -> None:
        """A finished session's tokens (prompt and response) join the store."""
        residues = keys.residues(prefix)
        with self.lock:
            trace = len(self.traces)
            self.traces.append(list(tokens))
            for (ctx_len, _), places in zip(self.lengths, self.places):
                if ctx_len < len(tokens):
                    ends = np.arange(ctx_len, len(tokens))
                    places.update(zip(keys.window_keys(residues, ends, ctx_len).tolist(),
                                      (ends + (trace << 32)).tolist()))

    def candidates(self, prefix: list[int], n: int, draft_len: int) -> list[Candidate]:
        end = prefix[n]
        out = []
        for (ctx_len, power), places in zip(self.lengths, self.places):
            if ctx_len > n:
                break
            place = places.get((end - prefix[n - ctx_len] * power) % M)
            if place is None:
                break  # no longer context occurred either (see the module docstring)
            trace, pos = divmod(place, 1 << 32)
            out.append(Candidate(ONLINE, ctx_len, 0, 0, self.traces[trace][pos : pos + draft_len]))
        return out


def recent_candidates(index: RecentIndex, tokens: list[int], prefix: list[int], draft_len: int) -> list[Candidate]:
    """recent_copy_candidates.sql at the current position n = len(tokens): per context length,
    what followed the latest (and second-latest) earlier place with the same context, repeating
    the distance back where it reaches the present. The latest places' drafts (lengths ascending),
    then the second-latest ones': (family order, context length) order."""
    n = len(tokens)
    end = prefix[n]
    latest_drafts: list[Candidate] = []
    second_drafts: list[Candidate] = []
    drafts: dict[int, list[int]] = {}  # place -> draft (lengths often share the latest place)
    for i, (ctx_len, power) in enumerate(index.lengths):
        if ctx_len > n:
            break
        seen = index.find(i, (end - prefix[n - ctx_len] * power) % M)
        if seen is None:
            break  # no longer context occurred either (see the module docstring)
        count, latest, second = seen
        for order, place, out in ((RECENT, latest, latest_drafts), (RECENT_2, second, second_drafts)):
            if place == NO_PLACE:
                continue
            draft = drafts.get(place)
            if draft is None:
                period = n - place
                draft = tokens[place : place + draft_len] if period >= draft_len else [
                    tokens[place + k % period] for k in range(draft_len)]
                drafts[place] = draft
            out.append(Candidate(order, ctx_len, count, n - place, draft))
    return latest_drafts + second_drafts


def ngram_all_candidates(drafter, prefix: list[int], n: int) -> tuple[list[Candidate], list[Candidate]]:
    """ngram_all_candidates.sql: the rank-1 and (where the bundle's run proposed them) rank-2
    continuations at every context length that hits: the rank-1 drafts, then the rank-2 ones, each
    by length ascending ((family order, context length) order). ContextTable.row is inlined: this
    is the hottest loop of a propose."""
    bundle = drafter.bundle
    store, draft_len = bundle.store, drafter.draft_len
    keys1, directory1 = bundle.ngram.keys, bundle.ngram.directory
    count1, pos1 = bundle.ngram_count, bundle.ngram_store_pos
    # (no table where the run did not propose them: then every plan2 is None)
    keys2, directory2 = (None, None) if bundle.ngram_rank2 is None else (bundle.ngram_rank2.keys,
                                                                          bundle.ngram_rank2.directory)
    count2, pos2 = bundle.ngram_rank2_count, bundle.ngram_rank2_store_pos
    end = prefix[n]
    rank1: list[Candidate] = []
    rank2: list[Candidate] = []
    for ctx_len, power, (offset, shift), plan2 in drafter.ngram_all_plan:
        if ctx_len > n:
            break
        key = (end - prefix[n - ctx_len] * power) % M
        bucket = offset + (key >> shift)
        stop = directory1[bucket + 1]
        row = bisect_left(keys1, key, directory1[bucket], stop)
        if row == stop or keys1[row] != key:
            break  # no longer context can hit (see the module docstring)
        at = pos1[row]
        rank1.append(Candidate(NGRAM_ALL, ctx_len, count1[row], 0, store[at : at + draft_len].tolist()))
        if plan2 is not None:
            bucket = plan2[0] + (key >> plan2[1])
            stop = directory2[bucket + 1]
            row = bisect_left(keys2, key, directory2[bucket], stop)
            if row < stop and keys2[row] == key:
                at = pos2[row]
                rank2.append(Candidate(NGRAM_RANK2, ctx_len, count2[row], 0, store[at : at + draft_len].tolist()))
    return rank1, rank2


def last_known(tokens: list[int]) -> tuple[int, int, int]:
    """The last known token, the one before it and the one before that (-1 where there is none):
    candidates.sql's per-position token ids.

    >>> last_known([7, 8, 9, 10]), last_known([5])
    ((10, 9, 8), (5, -1, -1))
    """
    return (tokens[-1] if tokens else -1, tokens[-2] if len(tokens) > 1 else -1, tokens[-3] if len(tokens) > 2 else -1)


class KnownTokens:
    """How often each token occurs in a session's known text, and where it last did: what
    draft_known_tokens.sql's known_tokens give a draft's seen_tokens8, first_token_count and
    first_token_distance. Kept up to date as the text grows (add)."""

    def __init__(self, tokens: list[int]) -> None:
        self.count: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.length = 0
        self.add(tokens)

    def add(self, tokens: list[int]) -> None:
        count, last = self.count, self.last
        for at, token in enumerate(tokens, start=self.length):
            count[token] = count.get(token, 0) + 1
            last[token] = at
        self.length += len(tokens)

    def state_of(self, token: int) -> tuple:
        """What add([token]) changes, for restore to put back."""
        return self.count.get(token, ABSENT), self.last.get(token, ABSENT), self.length

    def restore(self, token: int, state: tuple) -> None:
        for entries, held in zip((self.count, self.last), state):
            if held is ABSENT:
                entries.pop(token, None)
            else:
                entries[token] = held
        self.length = state[2]

    def features(self, head: tuple[int, ...]) -> tuple[int, int, int]:
        """(seen_tokens8, first_token_count, first_token_distance) of a draft whose first 8 tokens
        are `head`."""
        count = self.count
        seen = sum(token in count for token in head)
        if not head or head[0] not in count:
            return seen, 0, UNSEEN_DISTANCE
        return seen, count[head[0]], self.length - self.last[head[0]]


def feature_rows(candidates: list[Candidate], completion_pos: int, known: tuple[int, int, int],
                 rows: list[int], known_tokens: KnownTokens) -> np.ndarray:
    """The feature matrix of the candidates at indexes `rows` (candidate_features.sql, in
    feature_columns() order), over the whole set at the position, which is in (family order,
    context length) order; known: the last known tokens (last_known); known_tokens: the known
    text's. The SQL's windows become counts of the drafts' first 8, 4, 2 and 1 tokens, each level
    summed from the distinct keys of the one above."""
    heads = [tuple(c.draft[:8]) for c in candidates]
    agree8: dict[tuple, int] = {}
    for head in heads:
        agree8[head] = agree8.get(head, 0) + 1
    agree4: dict[tuple, int] = {}
    for head, n in agree8.items():
        agree4[head[:4]] = agree4.get(head[:4], 0) + n
    agree2: dict[tuple, int] = {}
    for head, n in agree4.items():
        agree2[head[:2]] = agree2.get(head[:2], 0) + n
    agree1: dict[tuple, int] = {}
    for head, n in agree2.items():
        agree1[head[:1]] = agree1.get(head[:1], 0) + n
    recent = ngram = None
    longest_copy = 0
    for i, c in enumerate(candidates):  # in (family order, context length) order: a family's last is its longest
        if c.order == RECENT:
            recent = i
        elif c.order == NGRAM_ALL:
            ngram = i
        elif c.order == COPY:
            longest_copy = c.ctx_len
    # arg_max(...) over the position: the longest recent copy's and n-gram's first 1 and 4 tokens
    recent1, recent4 = (heads[recent][:1], heads[recent][:4]) if recent is not None else (None, None)
    ngram1, ngram4 = (heads[ngram][:1], heads[ngram][:4]) if ngram is not None else (None, None)
    shared = (len(candidates), candidates[recent].ctx_len if recent is not None else 0,
              candidates[ngram].ctx_len if ngram is not None else 0, longest_copy, completion_pos)
    flat = []  # the rows one after another: numpy reads a flat list of ints fastest
    for i in rows:
        c, head = candidates[i], heads[i]
        head1, head4 = head[:1], head[:4]
        flat += (
            c.order, c.ctx_len, c.count, c.distance,
            agree1[head1] - 1, agree2[head[:2]] - 1, agree4[head4] - 1, agree8[head] - 1,
            *shared, len(set(c.draft)),
            bool(head) and head1 == recent1, bool(head) and head4 == recent4,
            bool(head) and head1 == ngram1, bool(head) and head4 == ngram4,
            head[0] if head else -1, known[0],
            head[1] if len(head) > 1 else -1, head[2] if len(head) > 2 else -1, known[1], known[2],
            *known_tokens.features(head),
        )
    return np.array(flat, dtype=np.int64).reshape(len(rows), WIDTH)


def scoring_indexes(candidates: list[Candidate], rows: list[int], choices: frozenset[int]) -> list[int]:
    """Each of `rows`' scorer (candidate indexes, in candidate order): of those rows with the same
    draft, the first of a `choices` family, else the first (confidence.scoring_rows)."""
    drafts = [tuple(candidates[i].draft) for i in rows]
    first: dict[tuple[int, ...], int] = {}
    for i, draft in zip(rows, drafts):
        if candidates[i].order in choices:
            first.setdefault(draft, i)
    for i, draft in zip(rows, drafts):
        first.setdefault(draft, i)
    return [first[draft] for draft in drafts]
