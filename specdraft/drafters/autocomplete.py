"""Prompt autocomplete: the one source that is text work, so it stays in Python.

The seed's rule: take the current response line (decoded text after the last newline), keep
what follows the last delimiter (: = " ' ( [ { *), and if at least 3 characters long, look it
up, case-insensitively, as the beginning of a span of the prompt; the draft is the rest of that
span, tokenized.

The decoded text depends on how it was decoded: the seed decodes the tokens between two
visited positions as one chunk, and a multi-byte character split across chunks decodes to
U+FFFD. So the current line depends on the walk (every position, every second position, or a
decode-step walk), and `PromptAutocomplete.walk` takes the visited positions.

>>> segment_after_delimiters("so x = 3 * (total cost")
'total cost'
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from functools import lru_cache

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
    or up to nine words; at least 8 characters; longest first."""
    spans: set[str] = set()
    starts = [m.start() for m in SPAN_START.finditer(prompt)]
    boundaries = sorted({len(prompt)} | {m.end() for m in SPAN_END.finditer(prompt)})
    for start in starts:
        for end in boundaries:
            if end <= start:
                continue
            if end - start > max_span_chars:
                break
            span = prompt[start:end].strip()
            if len(span) >= 8:
                spans.add(span)
        words = SPAN_WORDS.match(prompt[start:])
        if words and len(words.group(0)) >= 8:
            spans.add(words.group(0)[:max_span_chars].strip())
    return sorted(spans, key=lambda span: (-len(span), span))


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
    """span_prefix_map's lookups, from a sorted list instead of every prefix of every span.

    For an ASCII span, span[:n].lower() == span.lower()[:n], so the spans a lower-cased segment
    of length n can match are a contiguous run of the spans sorted by their lower-cased text;
    the first of them in prompt_spans order (rank) with 3 <= n < min(len(span), 240) wins.
    Non-ASCII spans (where lowering can change lengths, or depend on the next letter, as with
    a final sigma) keep the seed's exact per-prefix table.
    """

    def __init__(self, prompt: str) -> None:
        self.spans = prompt_spans(prompt)
        ascii_spans = [(span.lower(), rank) for rank, span in enumerate(self.spans) if span.isascii()]
        ascii_spans.sort()
        self.lowered = [lowered for lowered, _ in ascii_spans]
        self.ranks = [rank for _, rank in ascii_spans]
        self.other: dict[str, int] = {}
        for rank, span in enumerate(self.spans):
            if not span.isascii():
                for prefix_len in range(MIN_SEGMENT_CHARS, min(len(span), MAX_SPAN_CHARS)):
                    self.other.setdefault(span[:prefix_len].lower(), rank)

    def get(self, lowered: str) -> str | None:
        best = self.other.get(lowered)
        n = len(lowered)
        if MIN_SEGMENT_CHARS <= n < MAX_SPAN_CHARS and lowered.isascii():
            i = bisect_left(self.lowered, lowered)
            while i < len(self.lowered) and self.lowered[i].startswith(lowered):
                rank = self.ranks[i]
                if n < len(self.spans[rank]) and (best is None or rank < best):
                    best = rank
                i += 1
        return None if best is None else self.spans[best]


@lru_cache(maxsize=8)
def single_token_decoder(tokenizer: Tokenizer):
    """A cached decode of one token id (most steps of an every-position walk decode one token)."""
    return lru_cache(maxsize=None)(lambda token: tokenizer.decode([token]))


def prompt_score(segment: str) -> float:
    return 52.0 + min(len(segment), 56) * 0.55


class PromptAutocomplete:
    """Prompt-autocomplete drafts for one trace."""

    def __init__(self, tokenizer: Tokenizer, prompt: str, tokens: list[int], prompt_len: int, draft_len: int):
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.prompt_len = prompt_len
        self.draft_len = draft_len
        self.span_index = SpanIndex(prompt)
        self._encode = lru_cache(maxsize=4096)(self._encode_rest)
        self.start_walk()

    def _encode_rest(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text)[: self.draft_len]) if text else ()

    def propose(self, line: str) -> tuple[tuple[int, ...], float] | None:
        """Draft tokens and score after a response whose current line is `line`."""
        segment = segment_after_delimiters(line)
        if len(segment) < MIN_SEGMENT_CHARS:
            return None
        lowered = segment.lower()
        span = self.span_index.get(lowered)
        if not span or not span.lower().startswith(lowered):
            return None
        draft = self._encode(span[len(segment) :])
        if not draft:
            return None
        return draft, prompt_score(segment)

    def start_walk(self) -> None:
        self._line = ""
        self._known = self.prompt_len

    def line_at(self, completion_pos: int) -> str:
        """The current line once `completion_pos` response tokens are known, decoding as the
        seed's TextCursor: the tokens since the previous call are decoded as one chunk."""
        known_len = self.prompt_len + completion_pos
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

    def walk(self, completion_positions: Iterable[int]) -> Iterator[tuple[int, tuple[tuple[int, ...], float] | None]]:
        """Drafts at increasing response positions, decoded as one walk."""
        self.start_walk()
        for cpos in completion_positions:
            yield cpos, self.propose(self.line_at(cpos))
