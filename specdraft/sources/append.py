"""Stages 1-3 for more traces: `specdraft ingest --append` adds rows to a dataset already in the
warehouse without tokenizing it again.

The new rows are read and tokenized alone and written after the stored ones at the end of each
split (split_row continues its split, trace_ids follow the last one), so every trace the n-gram
tables were built from keeps its id and train order; the next build updates the tables from the
appended traces alone (incremental.py). The traces Parquet is rewritten to a temporary file and
renamed, inside the transaction that records the append in main.dataset_versions: a failure or a
kill leaves the dataset as it was, or (killed between the rename and the commit) complete, the
next run or append recording it in the catalog (warehouse/catalog.catch_up).
"""

from __future__ import annotations

from pathlib import Path

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.measure.timer import StageTimer
from specdraft.sources.dataset import source_signature
from specdraft.warehouse.catalog import catch_up, is_cataloged, record_dataset_version, version_record
from specdraft.warehouse.connection import Warehouse


def append_dataset(wh: Warehouse, cfg: RunConfig, data, dataset: str, name: str, columns=None) -> tuple[Path, dict]:
    """Stages 1-3 for more traces: read and tokenize only the rows in `data`, add them at the end
    of each split of dataset `name` (the traces Parquet rewritten atomically, earlier rows as
    stored) and record the append in the catalog. The next build updates the n-gram tables from
    the appended traces alone (incremental.py)."""
    from specdraft.sources.ingest import ColumnMap, read_traces
    from specdraft.sources.tokenizer import load_tokenizer
    from specdraft.sources.traces import appended_traces, read_metadata, traces_path

    path = traces_path(wh.traces_dir, name)
    if not path.exists():
        raise SpecdraftError(f"{wh.root}: no dataset {name!r} to append to; ingest it first "
                             f"(specdraft ingest --data FILE --name {name}), or name another with --name")
    if data is None:
        raise SpecdraftError("--append needs --data: the file(s) with the traces to add")
    meta = read_metadata(path)
    tokenizer = load_tokenizer(cfg.tokenizer)
    if meta.get("tokenizer_fingerprint") != tokenizer.fingerprint:
        raise SpecdraftError(f"{path}: dataset {name!r} was tokenized with {meta.get('tokenizer')}; cannot "
                             f"append with {cfg.tokenizer} (a different vocabulary): pass --tokenizer "
                             f"{meta.get('tokenizer')}")
    if not (wh.has_table("vocab") and is_cataloged(wh, name, meta)):
        catch_up(wh, name, path, meta, tokenizer)  # an ingest or append killed before its catalog's commit
    source = source_signature(data, dataset, columns)
    stored = [meta.get("source"), *(a["source"] for a in meta.get("appends", []))]
    if source in stored or source_signature(data, dataset, columns, earlier=True) in stored:
        raise SpecdraftError(f"{data}: already in dataset {name!r} (ingested or appended, unchanged since)")
    rows = read_traces(data, dataset, columns or ColumnMap(), every_split=False)
    with wh.transaction("append"), appended_traces(rows, tokenizer, path, source) as meta:
        record_dataset_version(wh, name, path, meta, version_record(meta)[1])
    return path, meta


def append_to_dataset(cfg: RunConfig, inputs) -> tuple[Path, dict]:
    """`specdraft ingest --append`: append_dataset in its own warehouse session (inputs: a
    pipeline.RunInputs naming the traces to add and the dataset they join)."""
    name = inputs.dataset_name
    with (Warehouse(Path(inputs.warehouse), memory_limit=inputs.memory_limit, debug=inputs.debug,
                    dataset=name) as wh, StageTimer().stage("append")):
        return append_dataset(wh, cfg, inputs.data, inputs.dataset, name, inputs.columns)
