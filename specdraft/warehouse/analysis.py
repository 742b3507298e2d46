"""Ad-hoc SQL over the warehouse: `specdraft sql`.

Analysts' own SQL runs as given (it is theirs); specdraft only chooses the connection mode
(read-only unless --write), the default dataset schema, and the output format.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import duckdb

from specdraft import files
from specdraft.errors import SpecdraftError, first_line
from specdraft.warehouse.connection import Warehouse


def default_dataset(wh: Warehouse) -> str | None:
    """The latest ingested dataset (the catalog's newest row), if any."""
    if not wh.has_table("dataset_versions", "main"):
        return None
    rows = wh.query("warehouse/latest_dataset").fetchall()
    return rows[0][0] if rows else None


def run_query(warehouse: Path, text: str, fmt: str = "table", output: Path | None = None,
              dataset: str | None = None, write: bool = False, echo: Callable[[str], None] = print) -> None:
    if fmt == "parquet" and output is None:
        raise SpecdraftError("--format parquet needs -o PATH")
    with Warehouse(warehouse, read_only=not write, memory_limit=None) as wh:
        name = dataset or default_dataset(wh)
        if name:
            wh.use_dataset(name)
        relation = wh.run_text(text)
        if relation is None:  # a statement without a result (with --write)
            return
        try:
            frame = relation.pl()
        except duckdb.Error as exc:
            raise SpecdraftError(f"query failed: {first_line(exc)}") from exc
    if fmt == "parquet":
        with files.atomic_path(output) as partial:
            frame.write_parquet(partial)
        return
    if fmt == "csv":
        out = frame.write_csv()
    elif fmt == "json":
        out = frame.write_json()
    else:
        import polars as pl

        buffer = io.StringIO()
        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=200, tbl_hide_dataframe_shape=True):
            buffer.write(str(frame))
        out = buffer.getvalue()
    if output is not None:
        files.write_text(output, out)
    else:
        echo(out.rstrip("\n"))
