"""Prompt autocomplete: the one source that is text work, so it stays in Python.

The seed's rule: take the current response line (decoded text after the last newline), keep
what follows the last delimiter (: = " ' ( [ { *), and if at least 3 characters long, look it
up, case-insensitively, as the beginning of a span of the prompt; the draft is the rest of that
span, tokenized.

The decoded text depends on how it was decoded: the seed decodes the tokens between two
visited positions as one chunk, and a multi-byte character split across chunks decodes to
U+FFFD. So the current line depends on the walk (every position, every second position, or a
decode-step walk), and `PromptAutocomplete.walk` takes the visited positions. --preset seed keeps
that (its decode step re-walks the source over the positions it visits, as the seed does).

--preset default reads its text from the tokens alone instead (`text_from_tokens`): the prompt
is the decode of its tokens (a live caller may not have the dataset's text, which the tokenizer
may have normalised), and the current line is the decode
of the known response's tokens since its last newline, whichever positions were visited before,
so the draft at a position is one function of the tokens before it. Its decode-step figures,
which walk over the every-position choices, are then what the live drafter proposes in that
walk. (Chunk by chunk, a line holding a character split over two tokens differed between the
two: every position decoded it as U+FFFDs, a live decode step as the character.)

>>> segment_after_delimiters("so x = 3 * (total cost")
'total cost'
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from functools import lru_cache

import numpy as np

from specdraft.sources.tokenizer import Tokenizer

DELIMITERS = (":", "=", '"', "'", "(", "[", "{", "*")
MAX_SPAN_CHARS = 240
MIN_SEGMENT_CHARS = 3
SPAN_START = re.compile(r"(?<!\w)(?:[$]?\d|[A-Za-z])")
SPAN_END = re.compile(r"[,.;:!?)](?:\s|$)")
SPAN_WORDS = re.compile(r"\S+(?:\s+\S+){0,8}")


def segment_after_delimiters(line: str) -> str:
    for delimiter in DELIMITERS:
        if delimiter in line:
            line = line.rsplit(delimiter, 1)[1]
    return line.lstrip()


def prompt_spans(prompt: str, max_span_chars: int = MAX_SPAN_CHARS) -> list[str]:
    """Spans of the prompt a response may quote: from a word or number start to a clause end,
    or up to nine words; at least 8 characters; longest first. (The seed's definition, kept as
    the oracle of SpanIndex, which needs only longest_spans.)"""
    spans: set[str] = set()
    boundaries = _boundaries(prompt)
    for start in _starts(prompt):
        for end in boundaries[bisect_right(boundaries, start) :]:
            if end - start > max_span_chars:
                break
            span = prompt[start:end].strip()
            if len(span) >= 8:
                spans.add(span)
        words = SPAN_WORDS.match(prompt, start)
        if words and len(words.group(0)) >= 8:
            spans.add(words.group(0)[:max_span_chars].strip())
    return _longest_first(spans)


def longest_spans(prompt: str, max_span_chars: int = MAX_SPAN_CHARS) -> list[str]:
    """The longest of prompt_spans at each start, distinct, longest first: all a lookup needs.

    Every span is a prefix of the longest span at its start, so wherever a span begins with a
    segment, the longest one at its start does too and sorts before it: the seed's table always
    answers with one of these. One binary search per start, so linear in the prompt, where
    prompt_spans pairs each start with every boundary within reach.

    >>> longest_spans("Tom buys 3 apples, then 2 pears.")[:3]
    ['Tom buys 3 apples, then 2 pears.', 'buys 3 apples, then 2 pears.', '3 apples, then 2 pears.']
    """
    spans: set[str] = set()
    boundaries = _boundaries(prompt)
    for start in _starts(prompt):
        last = bisect_right(boundaries, start + max_span_chars) - 1
        span = prompt[start : boundaries[last]].strip() if last >= 0 and boundaries[last] > start else ""
        if len(span) < 8:
            span = ""
        words = SPAN_WORDS.match(prompt, start)
        if words and len(words.group(0)) >= 8:
            quoted = words.group(0)[:max_span_chars].strip()
            span = quoted if len(quoted) > len(span) else span
        if span:
            spans.add(span)
    return _longest_first(spans)


def _longest_first(spans: set[str]) -> list[str]:
    """Sorted by (-len(span), span): by text, then (a stable sort) by length, longest first; two
    C-level sorts instead of a Python key per span.

    >>> _longest_first({"bb", "a", "ab", "ccc"})
    ['ccc', 'ab', 'bb', 'a']
    """
    ordered = sorted(spans)
    ordered.sort(key=len, reverse=True)
    return ordered


def _starts(prompt: str) -> list[int]:
    return [m.start() for m in SPAN_START.finditer(prompt)]


def _boundaries(prompt: str) -> list[int]:
    return sorted({len(prompt)} | {m.end() for m in SPAN_END.finditer(prompt)})


def span_prefix_map(prompt: str) -> dict[str, str]:
    """The seed's lookup table, built in full: lower-cased span beginnings (3 to 239 characters,
    shorter than the span) -> the first span in prompt_spans order. SpanIndex answers the same
    lookups without building it; tests compare the two."""
    prefix_map: dict[str, str] = {}
    for span in prompt_spans(prompt):
        for prefix_len in range(MIN_SEGMENT_CHARS, min(len(span), MAX_SPAN_CHARS)):
            prefix_map.setdefault(span[:prefix_len].lower(), span)
    return prefix_map


class SpanIndex:
    """span_prefix_map's lookups, without building it.

    Only longest_spans can answer. Sorted by their lower-cased text, the spans a lower-cased
    segment can begin are a contiguous run, and the first of them in prompt_spans order is the
    run's smallest rank (RangeMin answers that at once): a lookup costs two binary searches
    however long the prompt. That needs span[:n].lower() == span.lower()[:n], true unless a
    character lowers to two (İ) or by its context (a final Σ); such spans keep the seed's table
    of every prefix.
    """

    def __init__(self, prompt: str) -> None:
        self.spans = longest_spans(prompt)
        lowered = [span.lower() for span in self.spans]
        in_place = [len(low) == len(span) and "\u03a3" not in span for low, span in zip(lowered, self.spans)]
        ranks = sorted((rank for rank, ok in enumerate(in_place) if ok), key=lowered.__getitem__)
        self.lowered = [lowered[rank] for rank in ranks]
        self._first = RangeMin(ranks)
        self.other: dict[str, int] = {}
        for rank, span in enumerate(self.spans):
            if not in_place[rank]:  # _lowers_in_place
                for prefix_len in range(MIN_SEGMENT_CHARS, min(len(span), MAX_SPAN_CHARS)):
                    self.other.setdefault(span[:prefix_len].lower(), rank)

    def get(self, lowered: str) -> str | None:
        best = self.other.get(lowered)
        n = len(lowered)
        if MIN_SEGMENT_CHARS <= n < MAX_SPAN_CHARS:
            lo, hi = _prefix_run(self.lowered, lowered)
            if lo < hi:
                # the run's longest span: if it is no longer than the segment, none is
                rank = self._first(lo, hi)
                if n < len(self.spans[rank]) and (best is None or rank < best):
                    best = rank
        return None if best is None else self.spans[best]


def _lowers_in_place(text: str) -> bool:
    """Does every prefix of `text` lower to the same prefix of text.lower()?

    >>> _lowers_in_place("Total ß"), _lowers_in_place("İstanbul"), _lowers_in_place("ΣΑΣ")
    (True, False, False)
    """
    return "\u03a3" not in text and len(text.lower()) == len(text)


def _prefix_run(items: list[str], prefix: str) -> tuple[int, int]:
    """The run of sorted `items` that begin with `prefix` (items[lo:hi]).

    >>> _prefix_run(["ab", "abc", "abd", "b"], "ab")
    (0, 3)
    """
    lo = bisect_left(items, prefix)
    if ord(prefix[-1]) < 0x10FFFF:
        # every string with the prefix sorts before the prefix with its last character raised
        return lo, bisect_left(items, prefix[:-1] + chr(ord(prefix[-1]) + 1), lo)
    hi = lo
    while hi < len(items) and items[hi].startswith(prefix):
        hi += 1
    return lo, hi


class RangeMin:
    """The smallest of values[lo:hi] in O(1): a sparse table of the minima of every run of 2^k.

    >>> RangeMin([5, 2, 7, 1, 9])(0, 3), RangeMin([5, 2, 7, 1, 9])(2, 5)
    (2, 1)
    """

    def __init__(self, values: list[int]) -> None:
        self.levels = [np.asarray(values, dtype=np.int64)]
        width = 1
        while 2 * width <= len(values):
            below = self.levels[-1]
            self.levels.append(np.minimum(below[:-width], below[width:]))
            width *= 2

    def __call__(self, lo: int, hi: int) -> int:
        k = (hi - lo).bit_length() - 1
        level = self.levels[k]
        return int(min(level[lo], level[hi - (1 << k)]))


@lru_cache(maxsize=8)
def single_token_decoder(tokenizer: Tokenizer):
    """A cached decode of one token id (most steps of an every-position walk decode one token)."""
    return lru_cache(maxsize=None)(lambda token: tokenizer.decode([token]))


@lru_cache(maxsize=8)
def single_token_bytes(tokenizer: Tokenizer):
    """A cached token_bytes of one token id (a whole-line walk reads one token a step)."""
    return lru_cache(maxsize=None)(tokenizer.token_bytes)


def prompt_score(segment: str) -> float:
    return 52.0 + min(len(segment), 56) * 0.55


class PromptAutocomplete:
    """Prompt-autocomplete drafts for one trace. prompt: its text (the dataset's, or a live
    caller's); text_from_tokens (--preset default), or no prompt text: the decode of
    tokens[:prompt_len]. text_from_tokens also decodes the current line whole, else chunk by chunk
    as the seed's TextCursor (see the module docstring)."""

    def __init__(self, tokenizer: Tokenizer, prompt: str | None, tokens: list[int], prompt_len: int, draft_len: int,
                 text_from_tokens: bool = False):
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.prompt_len = prompt_len
        self.draft_len = draft_len
        self.text_from_tokens = text_from_tokens
        if text_from_tokens or prompt is None:
            prompt = tokenizer.decode(tokens[:prompt_len])
        self.span_index = SpanIndex(prompt)
        self._encode = lru_cache(maxsize=4096)(self._encode_rest)
        self.start_walk()

    def _encode_rest(self, text: str, segment: str = "") -> tuple[int, ...]:
        """The draft's ids: the seed encodes the rest of the span alone; with text_from_tokens, as
        it follows the segment (Tokenizer.encode_after: the same for a byte-level vocabulary)."""
        if not text:
            return ()
        ids = self.tokenizer.encode_after(segment, text) if self.text_from_tokens else self.tokenizer.encode(text)
        return tuple(ids[: self.draft_len])

    def propose(self, line: str) -> tuple[tuple[int, ...], float] | None:
        """Draft tokens and score after a response whose current line is `line`."""
        segment = segment_after_delimiters(line)
        if len(segment) < MIN_SEGMENT_CHARS:
            return None
        lowered = segment.lower()
        span = self.span_index.get(lowered)
        if not span or not span.lower().startswith(lowered):
            return None
        draft = self._encode(span[len(segment) :], segment)
        if not draft:
            return None
        return draft, prompt_score(segment)

    def start_walk(self) -> None:
        self._line = ""
        self._known = self.prompt_len
        self._line_bytes = b""  # text_from_tokens: the line's bytes

    def line_state(self) -> tuple:
        """Where the walk's current line stands, for restore_line_state to go back to."""
        return self._known, self._line, self._line_bytes

    def restore_line_state(self, state: tuple) -> None:
        self._known, self._line, self._line_bytes = state

    def line_at(self, completion_pos: int) -> str:
        """The current line once `completion_pos` response tokens are known, decoding as the
        seed's TextCursor: the tokens since the previous call are decoded as one chunk (or, with
        text_from_tokens, the line's tokens as one)."""
        known_len = self.prompt_len + completion_pos
        if self.text_from_tokens:
            return self._whole_line_at(known_len)
        if known_len > self._known:
            if known_len == self._known + 1:
                piece = single_token_decoder(self.tokenizer)(self.tokens[self._known])
            else:
                piece = self.tokenizer.decode(self.tokens[self._known : known_len])
            if "\n" in piece:
                self._line = piece.rsplit("\n", 1)[1]
            else:
                self._line += piece
            self._known = known_len
        return self._line

    def _whole_line_at(self, known_len: int) -> str:
        """The text after the last newline of the known response, decoded as one: the same
        whichever positions were visited before. The line is its tokens' bytes (token_bytes; a
        newline byte is never inside a character), decoded as tiktoken decodes: for a byte-level
        vocabulary the decode itself, for SentencePiece's the decode but for the line's leading
        space, which the segment looked up drops; a WordPiece line is spaced otherwise, the same
        in the warehouse and live. O(new tokens + the line's length) a call."""
        if known_len <= self._known:
            return self._line
        token_bytes = single_token_bytes(self.tokenizer)
        for token in self.tokens[self._known : known_len]:
            piece = token_bytes(token)
            if b"\n" in piece:
                self._line_bytes = piece.rsplit(b"\n", 1)[1]
            else:
                self._line_bytes += piece
        self._known = known_len
        self._line = self._line_bytes.decode("utf-8", errors="replace")
        return self._line

    def walk(self, completion_positions: Iterable[int]) -> Iterator[tuple[int, tuple[tuple[int, ...], float] | None]]:
        """Drafts at increasing response positions, decoded as one walk."""
        self.start_walk()
        for cpos in completion_positions:
            yield cpos, self.propose(self.line_at(cpos))
