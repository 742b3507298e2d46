"""The catalog: each dataset's vocab table and as_text() macro in its schema, and its rows in
main.dataset_versions (every ingest and append) behind the main.datasets view."""

from __future__ import annotations

from pathlib import Path

from specdraft.warehouse.connection import Warehouse


def register_dataset(wh: Warehouse, name: str, path: Path, meta: dict, tokenizer) -> None:
    """The dataset's vocab table and as_text() macro in its schema, and its row in the catalog."""
    from specdraft.sources.tokenizer import vocab_table

    with wh.transaction("register_dataset"):
        wh.store("vocab", vocab_table(tokenizer))
        wh.create_text_macro()
        record_dataset_version(wh, name, path, meta, meta.get("source"))


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


def cataloged_traces(wh: Warehouse, name: str) -> int | None:
    """The dataset's traces in the catalog (differs from the file only if an append was killed
    between its rename and its commit: then the catalog is brought up to date)."""
    if not wh.has_table("datasets", "main"):
        return None
    rows = wh.query("warehouse/dataset_traces", {"name": name}).fetchall()
    return rows[0][0] if rows else None
