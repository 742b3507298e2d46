"""Stages 2-3: tokenize ingested rows and write them as the dataset's traces Parquet file.

One file per dataset, `<warehouse>/traces/<dataset>.parquet`, with one row per trace:

    trace_id, split, split_row, prompt, completion, prompt_tokens, completion_tokens

Token lists are untruncated (--max-completion-tokens applies when tables are built). The
tokenizer's name and vocabulary fingerprint are stored in the file's metadata; a dataset is
never tokenized twice with different tokenizers under one name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdraft.errors import SpecdraftError
from specdraft.tokenizer import Tokenizer
from specdraft.warehouse import quote_identifier

METADATA_KEY = b"specdraft"


def traces_path(traces_dir: Path, dataset: str) -> Path:
    quote_identifier(dataset)  # dataset names become file and table names: check them
    return Path(traces_dir) / f"{dataset}.parquet"


def read_metadata(path: Path) -> dict:
    meta = pq.read_schema(path).metadata or {}
    if METADATA_KEY not in meta:
        raise SpecdraftError(f"{path}: not a specdraft traces file (no tokenizer metadata)")
    return json.loads(meta[METADATA_KEY])


def tokenize_rows(rows: pa.Table, tokenizer: Tokenizer) -> pa.Table:
    """Add prompt_tokens and completion_tokens (list<int32>) to ingested rows."""
    prompts = rows.column("prompt").to_pylist()
    completions = rows.column("completion").to_pylist()
    return rows.append_column("prompt_tokens", tokenizer.encode_to_arrow(prompts)).append_column(
        "completion_tokens", tokenizer.encode_to_arrow(completions)
    )


def write_traces(rows: pa.Table, tokenizer: Tokenizer, path: Path, source: str) -> Path:
    """Tokenize and write atomically (temporary file, then rename)."""
    tokenized = tokenize_rows(rows, tokenizer)
    trace_ids = pa.array(range(tokenized.num_rows), pa.int64())
    table = tokenized.add_column(0, "trace_id", trace_ids)
    metadata = {
        "tokenizer": tokenizer.name,
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "source": source,
        "rows": table.num_rows,
    }
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        pq.write_table(table, partial, compression="zstd")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
