"""Which dataset a run reads, and whether it must be ingested (stages 1-3) or is already in the
warehouse: its name, the signature of its input, the traces file and its catalog row."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.progress import say
from specdraft.warehouse.catalog import catch_up, is_cataloged, register_dataset
from specdraft.warehouse.connection import Warehouse


def dataset_name_for(data: str | list[str] | None, dataset: str) -> str:
    """A table-safe dataset name: the local file's stem (a directory's name), the folder that
    holds several files (one per split), or the hub id's last part. Several files in different
    folders have no name of their own: --name gives one.

    >>> dataset_name_for(["runs/a/eval.jsonl", "runs/a/train.jsonl"], "unused"), dataset_name_for(None, "org/my-set")
    ('a', 'my_set')
    """
    import os
    import re

    if not data:
        base = dataset.rsplit("/", 1)[-1]
    elif isinstance(data, (str, os.PathLike)):
        base = Path(data).stem
    else:
        folders = {Path(path).absolute().parent for path in data}
        if len(folders) > 1:
            raise SpecdraftError(f"--data: {len(data)} files in {len(folders)} folders; name the dataset with --name")
        base = folders.pop().name
    name = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_") or "dataset"
    return name if name[0].isalpha() else f"d_{name}"


def ingest_dataset(wh: Warehouse, cfg: RunConfig, data: str | None, dataset: str, name: str,
                   columns=None) -> tuple[Path, dict]:
    """Stages 1-3: read, tokenize and write the traces Parquet, unless it is already there.
    Only the rows the run's limits select are tokenized (traces.py); a stored dataset lacking some
    of them has them added.

    The stored dataset (with any `ingest --append`ed traces) is used when `data` is the input it
    was first ingested from, unchanged, or when `data` is None and it came from local files; a
    changed input is ingested afresh, replacing it.
    """
    from specdraft.sources.ingest import ColumnMap, read_traces
    from specdraft.sources.tokenizer import load_tokenizer
    from specdraft.sources.traces import (
        covers,
        read_metadata,
        split_limits,
        tokenize_more,
        tokenized_traces,
        traces_path,
    )

    path = traces_path(wh.traces_dir, name)
    source = source_signature(data, dataset, columns)
    limits = split_limits(cfg)
    tokenizer = load_tokenizer(cfg.tokenizer)
    meta = read_metadata(path) if path.exists() else None
    if meta is not None and meta.get("tokenizer_fingerprint") != tokenizer.fingerprint:
        raise SpecdraftError(
            f"{path}: dataset {name!r} was tokenized with {meta.get('tokenizer')}, not {cfg.tokenizer}: pass "
            f"--tokenizer {meta.get('tokenizer')}, or ingest it with {cfg.tokenizer} under another name (--name) "
            "or in another --warehouse"
        )
    if not _use_stored(meta, data, (source, source_signature(data, dataset, columns, earlier=True))):
        if meta is not None and meta.get("appends"):
            say(f"{data or dataset} is not the input dataset {name!r} was ingested from, or it changed: "
                f"ingesting it afresh, which replaces the dataset and its {len(meta['appends'])} append(s)",
                always=True)
        table, meta = tokenized_traces(read_traces(data, dataset, columns or ColumnMap()), tokenizer, source, limits)
        _write_and_register(wh, name, path, table, meta, tokenizer)
        return path, meta
    if not covers(meta.get("tokenized"), limits):
        meta = tokenize_more(path, meta, tokenizer, limits)  # the file's version, and so the catalog's row, unchanged
    if not (wh.has_table("vocab") and is_cataloged(wh, name, meta)):
        catch_up(wh, name, path, meta, tokenizer)  # written, then killed before the catalog's commit
    return path, meta


def _write_and_register(wh: Warehouse, name: str, path: Path, table, meta: dict, tokenizer) -> None:
    """The traces file written under a temporary name in a thread (Arrow's writer lets go of the
    GIL) while the catalog takes the dataset's vocabulary (ingest took 1.19-1.55 s against
    1.36-1.70 s with the two in turn); renamed into place here, on this thread, just before the
    catalog commits. Anything that fails or is interrupted before then leaves the stored file as
    it was, and the temporary one is removed (once the writer is done with it)."""
    from specdraft.files import make_dirs, partial_path, rename_partial
    from specdraft.sources.traces import write_traces_file

    make_dirs(path.parent)
    partial = partial_path(path)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="traces-writer") as writer:
            written = writer.submit(write_traces_file, table, meta, partial)
            del table
            register_dataset(wh, name, path, meta, tokenizer,
                             before_commit=lambda: rename_partial(written.result(), path))
    finally:
        partial.unlink(missing_ok=True)


def _use_stored(meta: dict | None, data, sources: tuple[str, ...]) -> bool:
    """Is the stored dataset the one asked for (its input's signature one of `sources`)? See
    ingest_dataset."""
    import json

    if meta is None:
        return False
    if meta.get("source") in sources:
        return True
    try:
        from_hub = "hub" in json.loads(meta.get("source") or "{}")
    except ValueError:
        from_hub = False
    return data is None and not from_hub


def source_signature(data: str | None, dataset: str, columns, earlier: bool = False) -> str:
    """Identifies the input: the file's path, size and modification time, or the hub id.
    earlier=True: the signature datasets ingested before 2026-12-07 recorded, over every file of a
    directory (not only those the reader reads), in the flags' order; a stored dataset (and its
    appends) recorded under it is still the one asked for, not one to ingest afresh."""
    import json
    import os

    from specdraft.sources.ingest import directory_files

    if data is None:
        return json.dumps({"hub": dataset, "columns": repr(columns)})
    paths = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    stats = []
    for p in paths:
        p = Path(p)
        # the files the reader reads (earlier: every file)
        files = (sorted(p.iterdir()) if earlier else directory_files(p)) if p.is_dir() else [p]
        stats += [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()]
    # sorted: the reader tells one split's file from another's by its name, not by the flags' order
    return json.dumps({"files": stats if earlier else sorted(stats), "columns": repr(columns)})
