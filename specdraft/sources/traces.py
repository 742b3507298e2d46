"""Stages 2-3: tokenize ingested rows and write them as the dataset's traces Parquet file.

One file per dataset, `<warehouse>/traces/<dataset>.parquet`, with one row per trace:

    trace_id, split, split_row, prompt, completion, prompt_tokens, completion_tokens

Token lists are untruncated (--max-completion-tokens applies when tables are built). The
tokenizer's name and vocabulary fingerprint are stored in the file's metadata; a dataset is
never tokenized twice with different tokenizers under one name.

`specdraft ingest --append` adds rows at the end of each split (split_row continues, trace_ids
follow the existing ones), so the traces a table was built from keep their ids and train order;
each append is listed in the metadata (`appends`) with a version id.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdraft.errors import SpecdraftError
from specdraft.files import atomic_path
from specdraft.sources.tokenizer import Tokenizer
from specdraft.warehouse.connection import quote_identifier

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
    with atomic_path(path) as partial:
        pq.write_table(table, partial, compression="zstd")
    return path


def dataset_versions(meta: dict) -> list[tuple[int, str]]:
    """(traces, version) of a dataset as first ingested ("0") and after each append, oldest
    first: tables built from a version cover trace_ids 0 .. traces - 1.

    >>> dataset_versions({"rows": 7, "appends": [{"first_trace_id": 5, "traces": 2, "version": "ab"}]})
    [(5, '0'), (7, 'ab')]
    """
    appends = meta.get("appends", [])
    versions = [(appends[0]["first_trace_id"] if appends else meta.get("rows"), "0")]
    return versions + [(a["first_trace_id"] + a["traces"], a["version"]) for a in appends]


@contextmanager
def appended_traces(rows: pa.Table, tokenizer: Tokenizer, path: Path, source: str) -> Iterator[dict]:
    """Tokenize `rows` (split, split_row, prompt, completion) and write `path` with them added at
    the end of each split to a temporary file; yield the new metadata. When the block exits
    cleanly the file replaces `path` (one rename); on an error or a kill, `path` is unchanged.

    An appended row's split_row continues its split's count, its trace_id follows the file's last.
    The caller (append.append_dataset) has checked that `tokenizer` is the dataset's.
    """
    import polars as pl

    meta = read_metadata(path)
    first = pq.read_metadata(path).num_rows
    counts = pl.read_parquet(path, columns=["split"]).group_by("split").len()
    before = dict(zip(counts["split"].to_list(), counts["len"].to_list(), strict=True))
    shifted = pl.from_arrow(rows).with_columns(
        pl.col("split_row") + pl.col("split").replace_strict(before, default=0, return_dtype=pl.Int64)
    )
    tokenized = tokenize_rows(shifted.to_arrow(), tokenizer)
    table = tokenized.add_column(0, "trace_id", pa.array(range(first, first + rows.num_rows), pa.int64()))
    added = shifted.group_by("split", maintain_order=True).len()
    appended = {
        "source": source,
        "first_trace_id": first,
        "traces": rows.num_rows,
        "splits": dict(zip(added["split"].to_list(), added["len"].to_list(), strict=True)),
        "version": secrets.token_hex(6),
        "appended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    meta = {**meta, "rows": first + rows.num_rows, "appends": [*meta.get("appends", []), appended]}
    with atomic_path(path) as partial:
        with pq.ParquetFile(path) as existing:
            schema = existing.schema_arrow.with_metadata({METADATA_KEY: json.dumps(meta).encode()})
            with pq.ParquetWriter(partial, schema, compression="zstd") as writer:
                for batch in existing.iter_batches():  # the stored rows as they are: no re-tokenizing
                    writer.write_batch(batch)
                writer.write_table(table.select(schema.names).cast(schema))
        yield meta
