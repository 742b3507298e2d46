"""`specdraft export --format sglang-corpus`, read back as SGLang reads its NGRAM external corpus.

`read_as_sglang` does what iter_external_corpus_chunks does (SGLang commit 252129aef773,
python/sglang/srt/speculative/cpp_ngram/external_corpus.py; NGRAMWorker passes it the served
model's tokenizer): the file opened as UTF-8 text and read line by line, blank lines skipped, each
other line parsed as JSON and required to be a string, encoded with
`tokenizer.encode(text, add_special_tokens=False)`, empty documents skipped, the separator token
-(2**31) between documents, and an error once the tokens (separators included) pass max_tokens.
(SGLang also cuts the stream into 4096-token chunks for its automaton; the tokens are the same.)
The served model's tokenizer here is the run's (Qwen2.5's vocabulary, offline).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.integrations.sglang import corpus_line, export_sglang_corpus
from specdraft.pipeline import run_all
from specdraft.sources.tokenizer import load_tokenizer
from specdraft.warehouse.connection import Warehouse

from .test_parity import FIXTURE, SEED

DATASET = "parity_traces"
SEPARATOR = -(2**31)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A --preset seed run of the parity fixture."""
    root = tmp_path_factory.mktemp("sglang")
    results = run_all(SEED, root / "warehouse", str(FIXTURE), "unused")
    return root / "warehouse", results


@pytest.fixture(scope="module")
def train_traces(built):
    """(prompt tokens, response tokens) of each train trace, as the run's tables hold them."""
    with Warehouse(built[0], read_only=True, dataset=DATASET, memory_limit=None) as wh:
        rows = wh.run_text("select prompt_len, tokens from selected_traces where split = 'train' "
                           "order by trace_id").fetchall()
    return [(tokens[:prompt_len], tokens[prompt_len:]) for prompt_len, tokens in rows]


class ServedTokenizer:
    """The served model's tokenizer as SGLang calls it (a Hugging Face tokenizer's encode)."""

    def __init__(self, name: str):
        self._tokenizer = load_tokenizer(name)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False  # what SGLang passes; Qwen's adds none anyway
        return self._tokenizer.encode(text)


def read_documents(path: Path) -> list[str]:
    """The documents SGLang's loader finds in the file, or its ValueError."""
    documents = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"line {number}: not JSON: {exc.msg}") from exc
                if not isinstance(record, str):
                    raise ValueError(f"line {number}: not a JSON string")
                documents.append(record)
    return documents


def read_as_sglang(path: Path, tokenizer, max_tokens: int) -> list[int]:
    """The token stream SGLang's automaton is built from (module docstring)."""
    stream: list[int] = []
    for document in read_documents(path):
        ids = list(tokenizer.encode(document, add_special_tokens=False))
        if not ids:
            continue
        if stream:
            ids = [SEPARATOR, *ids]
        if len(stream) + len(ids) > max_tokens:
            raise ValueError(f"over the token limit ({max_tokens})")
        stream += ids
    return stream


def stream_of(documents: list[list[int]]) -> list[int]:
    out: list[int] = []
    for ids in documents:
        out += ([SEPARATOR] if out else []) + ids
    return out


def test_sglang_reads_back_the_runs_train_traces(built, train_traces, tmp_path):
    warehouse, results = built
    out = tmp_path / "corpus.jsonl"
    summary = export_sglang_corpus(warehouse, None, out)
    stream = read_as_sglang(out, ServedTokenizer(SEED.tokenizer), max_tokens=10_000_000)
    # every train trace, in order: its prompt, a separator, its response, a separator, the next
    assert stream == stream_of([part for trace in train_traces for part in trace])
    assert len(train_traces) == results["train_examples"] == summary["traces"] == 42
    tokens = sum(len(p) + len(r) for p, r in train_traces)
    assert (summary["documents"], summary["tokens"], summary["not_round_trip"]) == (84, tokens, 0)
    assert summary["sglang_tokens"] == len(stream) == tokens + 83
    assert summary["bytes"] == out.stat().st_size
    assert summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    # SGLang's limit counts what the summary says: one token fewer and it refuses the file
    read_as_sglang(out, ServedTokenizer(SEED.tokenizer), max_tokens=summary["sglang_tokens"])
    with pytest.raises(ValueError, match="token limit"):
        read_as_sglang(out, ServedTokenizer(SEED.tokenizer), max_tokens=summary["sglang_tokens"] - 1)


def test_the_corpus_is_the_drafter_bundles_token_store(built, tmp_path):
    """The same store SGLang users get: the bundle's store.arrow, token for token."""
    import pyarrow as pa

    from specdraft.live.bundle import export_bundle

    warehouse, _ = built
    export_bundle(warehouse, None, tmp_path / "bundle")
    with pa.memory_map(str(tmp_path / "bundle" / "store.arrow")) as source:
        store = pa.ipc.open_file(source).read_all().column("token_id").to_pylist()
    export_sglang_corpus(warehouse, None, tmp_path / "corpus.jsonl")
    stream = read_as_sglang(tmp_path / "corpus.jsonl", ServedTokenizer(SEED.tokenizer), max_tokens=10_000_000)
    assert [t for t in stream if t != SEPARATOR] == store


def test_encoding_a_trace_whole_would_merge_across_the_seam(train_traces):
    """Why two documents per trace: the prompt's last token and the response's first merge."""
    tokenizer = load_tokenizer(SEED.tokenizer)
    merged = sum(tokenizer.encode(tokenizer.decode(p + r)) != p + r for p, r in train_traces)
    apart = sum(tokenizer.encode(tokenizer.decode(part)) != part for trace in train_traces for part in trace)
    assert merged > len(train_traces) // 2 and apart == 0


@pytest.mark.parametrize("text", ["line\nbreak", "cr\rlf\r\n", "nel\x85ls\u2028ps\u2029", 'quote " back \\',
                                  "tab\tnul\x00", "ünïcødé ∑ 数学", "  ", "{\"json\": 1}"])
def test_any_text_is_one_line_sglang_reads_back(text, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(corpus_line("first") + corpus_line(text) + corpus_line("last"))
    assert read_documents(path) == ["first", text, "last"]
    assert path.read_bytes().count(b"\n") == 3 and len(path.read_text(encoding="utf-8").splitlines()) == 3


def test_cli_writes_the_corpus_stdout_is_data(built, tmp_path):
    warehouse, _ = built
    out = tmp_path / "corpus.jsonl"
    result = CliRunner().invoke(main, ["export", "--format", "sglang-corpus", "--out", str(out),
                                       "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output
    name, size, digest = result.stdout.strip().split("\t")
    assert (name, int(size), digest) == (str(out), out.stat().st_size, hashlib.sha256(out.read_bytes()).hexdigest())
    assert "42 train traces" in result.stderr and "84 documents" in result.stderr
    # a directory is a usage error; the default format is still the bundle
    result = CliRunner().invoke(main, ["export", "--format", "sglang-corpus", "--out", str(tmp_path),
                                       "--warehouse", str(warehouse)])
    assert result.exit_code == 2 and "is a directory" in result.output
    result = CliRunner().invoke(main, ["export", "--out", str(tmp_path / "bundle"), "--warehouse", str(warehouse)])
    assert result.exit_code == 0 and (tmp_path / "bundle" / "manifest.json").exists()
    result = CliRunner().invoke(main, ["export", "--out", str(out), "--warehouse", str(warehouse)])
    assert result.exit_code == 2 and "is a file" in result.output


def test_an_export_replaces_a_corpus_but_no_other_file(built, tmp_path):
    """--out may name an earlier corpus (or an empty file), which is replaced; any other file is
    someone's data and is refused, untouched (a Parquet of traces, a text file)."""
    warehouse, _ = built
    older = tmp_path / "corpus.jsonl"
    older.write_text('"an older corpus"\n')
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    for out in (older, empty):
        result = CliRunner().invoke(main, ["export", "--format", "sglang-corpus", "--out", str(out),
                                           "--warehouse", str(warehouse)])
        assert result.exit_code == 0, result.output
        assert out.read_bytes().startswith(b'"') and "an older corpus" not in out.read_text()
    for name, data in (("traces.parquet", b"PAR1\x15\x04"), ("notes.txt", b"my notes\n"), ("list.json", b"[1, 2]\n")):
        out = tmp_path / name
        out.write_bytes(data)
        result = CliRunner().invoke(main, ["export", "--format", "sglang-corpus", "--out", str(out),
                                           "--warehouse", str(warehouse)])
        assert result.exit_code == 1 and "exists and is not an SGLang corpus" in result.output, result.output
        assert out.read_bytes() == data


def test_a_failed_export_leaves_the_old_corpus(built, tmp_path, monkeypatch):
    from specdraft import files

    warehouse, _ = built
    out = tmp_path / "corpus.jsonl"
    out.write_text('"an older corpus"\n')

    def fail(point):
        if point == "write:corpus.jsonl:before_rename":
            raise RuntimeError("killed")

    monkeypatch.setattr(files, "reach", fail)
    with pytest.raises(RuntimeError):
        export_sglang_corpus(warehouse, None, out)
    assert out.read_text() == '"an older corpus"\n' and sorted(tmp_path.iterdir()) == [out]


def test_any_presets_run_exports(built, tmp_path):
    """The corpus is the run's train traces, whichever policy chose among drafts."""
    from specdraft.report.results import record_run

    warehouse, results = built
    other = tmp_path / "warehouse"
    shutil.copytree(warehouse, other)
    with Warehouse(other, dataset=DATASET) as wh:
        record_run(wh, {**results, "preset": "default"}, run_id="default-run")
    a = export_sglang_corpus(other, "default-run", tmp_path / "a.jsonl")
    b = export_sglang_corpus(warehouse, None, tmp_path / "b.jsonl")
    assert a["run_id"] == "default-run" and a["sha256"] == b["sha256"]
