"""The catalog: each dataset's vocab table and as_text() macro in its schema, and its rows in
main.dataset_versions (every ingest and append) behind the main.datasets view."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from specdraft.warehouse.connection import Warehouse


def register_dataset(wh: Warehouse, name: str, path: Path, meta: dict, tokenizer,
                     before_commit: Callable[[], object] | None = None) -> None:
    """The dataset's vocab table and as_text() macro in its schema, and its row in the catalog.
    before_commit: called last before the commit (what must be done by then: the traces file
    written, which ingest writes meanwhile); if it raises, nothing is committed."""
    with wh.transaction("register_dataset"):
        store_vocab(wh, tokenizer)
        record_dataset_version(wh, name, path, meta, meta.get("source"))
        if before_commit is not None:
            before_commit()


def store_vocab(wh: Warehouse, tokenizer) -> None:
    """The dataset's vocab table and the as_text() macro over it."""
    from specdraft.sources.tokenizer import vocab_table

    wh.store("vocab", vocab_table(tokenizer))
    wh.create_text_macro()


def record_dataset_version(wh: Warehouse, name: str, path: Path, meta: dict, source: str | None) -> None:
    """A row in main.dataset_versions: an ingest (source: the input's signature) or an append
    (source: a JSON record of the appended input, version and rows per split)."""
    wh.materialize(
        "warehouse/dataset_versions",
        {
            "name": name,
            "traces_path": str(path),
            "tokenizer": meta.get("tokenizer"),
            "tokenizer_fingerprint": meta.get("tokenizer_fingerprint"),
            "source": source,
            "traces": meta.get("rows"),
        },
        append=wh.has_table("dataset_versions", "main"),
        schema="main",
    )
    wh.materialize("warehouse/datasets", view=True, schema="main", persistent_view=True)


def version_record(meta: dict) -> tuple[int, str | None]:
    """(traces, source) of the catalog row a traces file's latest version has: its ingest's (the
    input's signature), or its last append's (a JSON record of what was appended).

    >>> version_record({"rows": 7, "source": "s"})
    (7, 's')
    >>> version_record({"rows": 7, "appends": [{"version": "ab", "first_trace_id": 5, "traces": 2,
    ...                                         "splits": {"train": 2}, "source": "t"}]})[1]
    '{"append": "ab", "first_trace_id": 5, "splits": {"train": 2}, "source": "t"}'
    """
    return version_records(meta)[-1]


def version_records(meta: dict) -> list[tuple[int, str | None]]:
    """(traces, source) of the catalog rows of every version of a traces file, oldest first: its
    ingest's, then each append's.

    >>> version_records({"rows": 7, "source": "s", "appends": [{"version": "ab", "first_trace_id": 5, "traces": 2,
    ...                                                          "splits": {"train": 2}, "source": "t"}]})[0]
    (5, 's')
    """
    appends = meta.get("appends", [])
    records = [(appends[0]["first_trace_id"] if appends else meta.get("rows"), meta.get("source"))]
    for added in appends:
        record = {"append": added["version"], "first_trace_id": added["first_trace_id"], "splits": added["splits"],
                  "source": added["source"]}
        records.append((added["first_trace_id"] + added["traces"], json.dumps(record)))
    return records


def is_cataloged(wh: Warehouse, name: str, meta: dict) -> bool:
    """Does the catalog's latest row for `name` record the traces file's latest version? Not when
    an ingest or an append was killed between the file's rename and the catalog's commit: then
    the next run, or append, records it (catch_up)."""
    if not wh.has_table("dataset_versions", "main"):
        return False
    rows = wh.query("warehouse/dataset_version", {"name": name}).fetchall()
    return bool(rows) and tuple(rows[0]) == version_record(meta)


def catch_up(wh: Warehouse, name: str, path: Path, meta: dict, tokenizer) -> None:
    """Record the traces file's versions the catalog lacks (those after the longest run of its
    latest rows that they begin with), as the ingest or appends that wrote them would have, and
    the dataset's vocab table and macro if they are missing."""
    wanted = version_records(meta)
    recorded = []
    if wh.has_table("dataset_versions", "main"):
        recorded = [tuple(row) for row in wh.query("warehouse/dataset_history", {"name": name}).fetchall()]
    known = next((k for k in range(min(len(wanted), len(recorded)), 0, -1) if recorded[-k:] == wanted[:k]), 0)
    if not wh.has_table("vocab"):
        with wh.transaction("append"):
            store_vocab(wh, tokenizer)
    # one transaction each, as the killed commands made them: a row's time is its transaction's
    # start (now()), which orders the catalog, and rows of one transaction would tie
    for traces, source in wanted[known:]:
        with wh.transaction("append"):
            record_dataset_version(wh, name, path, {**meta, "rows": traces}, source)
