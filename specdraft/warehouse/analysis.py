"""Ad-hoc SQL over the warehouse: `specdraft sql`.

Analysts' own SQL runs as given (it is theirs); specdraft only chooses the connection mode
(read-only unless --write), the default dataset schema, and the output format.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from specdraft import files
from specdraft.errors import SpecdraftError
from specdraft.warehouse.connection import Warehouse, fetched


def default_dataset(wh: Warehouse) -> str | None:
    """The latest ingested dataset (the catalog's newest row), if any."""
    if not wh.has_table("dataset_versions", "main"):
        return None
    rows = wh.query("warehouse/latest_dataset").fetchall()
    return rows[0][0] if rows else None


# DuckDB types polars cannot take (intervals), and those an output format cannot hold (CSV: nested
# values and bytes; JSON: bytes, which polars' writers refused with a traceback): such columns are
# shown as DuckDB's own text of them, [1, 2], 3 days or \xE6\xB1
NOT_IN_POLARS = ("interval",)
NOT_IN_FORMAT = {"csv": ("list", "array", "struct", "map", "union", "blob"), "json": ("blob",)}


def as_text_where_needed(relation, fmt: str):
    """The query's result with the columns the output (fmt: table, csv, json, parquet) cannot hold
    cast to VARCHAR (the rest as they are); the relation itself when there are none."""
    unfit = NOT_IN_POLARS + NOT_IN_FORMAT.get(fmt, ())
    types = [column_type.id for column_type in relation.types]
    if not any(type_id in unfit for type_id in types):
        return relation
    quoted = ['"' + name.replace('"', '""') + '"' for name in relation.columns]
    return relation.project(", ".join(f"{name}::varchar as {name}" if type_id in unfit else name
                                      for name, type_id in zip(quoted, types, strict=True)))


def run_query(warehouse: Path, text: str, fmt: str = "table", output: Path | None = None,
              dataset: str | None = None, write: bool = False, echo: Callable[[str], None] = print) -> None:
    if fmt == "parquet" and output is None:
        raise SpecdraftError("--format parquet needs -o PATH")
    with Warehouse(warehouse, read_only=not write, memory_limit=None) as wh:
        name = dataset or default_dataset(wh)
        if name:
            wh.use_dataset(name)
        relation = wh.run_text(text, all_or_nothing=write)  # (outside any transaction: its own)
        if relation is None:  # a statement without a result (with --write)
            return
        frame = fetched(lambda: as_text_where_needed(relation, fmt).pl())
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
