"""A run's train traces as SGLang's NGRAM external corpus: `specdraft export --format sglang-corpus`.

SGLang's NGRAM speculative algorithm preloads `--speculative-ngram-external-corpus-path` with
iter_external_corpus_chunks (python/sglang/srt/speculative/cpp_ngram/external_corpus.py, SGLang
commit 252129aef773), which NGRAMWorker calls with the served model's tokenizer. It reads the file
as JSON Lines, UTF-8: blank lines are skipped, every other line must be one JSON string (else an
error naming the line), a document, encoded with `tokenizer.encode(document,
add_special_tokens=False)`; documents with no tokens are skipped, the rest joined by a separator
token that no match crosses, at most --speculative-ngram-external-corpus-max-tokens tokens in all
(separators included; past that, an error).

So the corpus is text. Each train trace of the run, as its tables were built from it (limits
applied, responses cut: the tokens of the run's drafter bundle's store), is written as two
documents, its prompt and its response, each decoded with the run's tokenizer. Two, because
encoding a trace's text whole merges tokens across the seam ("?" then "<think" becomes "?<" and
"think"), while each part encodes back to exactly its tokens with the run's tokenizer: a prompt
always (its tokens are its text's encoding), a response cut short in every case measured (the
parity fixture's, and the first 3,000 of qwen25-math-rollouts and of gsm8k-human cut at 512
tokens). So SGLang, serving a model with the run's tokenizer, indexes the store's tokens, with a
separator at each seam. Documents that do not encode back to their tokens are counted
(`not_round_trip`); SGLang indexes them as it encodes them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specdraft.errors import SpecdraftError

BATCH_ROWS = 2048
# Line breaks JSON leaves unescaped (str.splitlines breaks at them; SGLang's file iteration does
# not, but any reader may)
_UNESCAPED_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def export_sglang_corpus(warehouse: Path, run_id: str | None, out: Path) -> dict:
    """Write the train traces of a recorded run (default: the latest) to `out` as SGLang's
    external corpus (module docstring), atomically; returns what was written."""
    from specdraft.config import RunConfig
    from specdraft.files import atomic_path
    from specdraft.live.bundle import check_tables_are_the_runs
    from specdraft.report.results import load_run
    from specdraft.sources.tokenizer import load_tokenizer
    from specdraft.warehouse.connection import Warehouse

    results = load_run(Path(warehouse), run_id)
    cfg = RunConfig.recorded(results["config"])
    tokenizer = load_tokenizer(cfg.tokenizer)
    if tokenizer.fingerprint != results["tokenizer"]["fingerprint"]:
        raise SpecdraftError(f"run {results['run_id']} was tokenized with {cfg.tokenizer} fingerprint "
                             f"{results['tokenizer']['fingerprint']}; the tokenizer loaded under that name "
                             f"here has {tokenizer.fingerprint}")
    out = Path(out)
    if out.is_dir():
        raise SpecdraftError(f"{out}: is a directory; the SGLang corpus is one file (e.g. corpus.jsonl)")
    if out.exists() and not is_corpus(out):
        raise SpecdraftError(f"{out}: exists and is not an SGLang corpus; choose another --out")
    summary = {"path": str(out), "run_id": results["run_id"], "dataset": results["dataset"],
               "tokenizer": cfg.tokenizer, "traces": 0, "documents": 0, "tokens": 0, "not_round_trip": 0,
               "bytes": 0}
    digest = hashlib.sha256()
    with Warehouse(Path(warehouse), read_only=True, dataset=results["dataset"], memory_limit=None) as wh:
        check_tables_are_the_runs(wh, results)
        traces = wh.query("integrations/corpus_traces").to_arrow_table()
    # Arrow holds the tokens compactly; Python lists are made a batch of traces at a time
    with atomic_path(out) as partial, open(partial, "wb") as f:
        for batch in traces.to_batches(max_chunksize=BATCH_ROWS):
            for prompt_len, tokens in zip(batch.column("prompt_len").to_pylist(),
                                          batch.column("tokens").to_pylist()):
                summary["traces"] += 1
                parts = [part for part in (tokens[:prompt_len], tokens[prompt_len:]) if part]
                texts = [tokenizer.decode(part) for part in parts]
                for part, text, again in zip(parts, texts, tokenizer.encode_batch(texts)):
                    line = corpus_line(text)
                    f.write(line)
                    digest.update(line)
                    summary["bytes"] += len(line)
                    summary["documents"] += 1
                    summary["tokens"] += len(part)
                    summary["not_round_trip"] += again != part
    # what SGLang counts against --speculative-ngram-external-corpus-max-tokens
    summary["sglang_tokens"] = summary["tokens"] + max(summary["documents"] - 1, 0)
    summary["sha256"] = digest.hexdigest()
    return summary


def is_corpus(path: Path) -> bool:
    """Is the file at `path` a corpus an export may replace: empty, or its first line a JSON string
    (corpus_line's)? Anything else is someone's data, which an export must not write over."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    if not first:
        return True
    try:
        return isinstance(json.loads(first), str)
    except ValueError:  # (UnicodeDecodeError is one)
        return False


def corpus_line(text: str) -> bytes:
    r"""One document as a line of the corpus: a JSON string in UTF-8, with no line break inside.

    >>> corpus_line('x\ny "z" \u2028')
    b'"x\\ny \\"z\\" \\u2028"\n'
    """
    return (json.dumps(text, ensure_ascii=False).translate(_UNESCAPED_BREAKS) + "\n").encode("utf-8")
