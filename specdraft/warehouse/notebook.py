"""A read-only handle on a warehouse for notebooks: `specdraft.open(path)`.

    >>> import specdraft
    >>> wh = specdraft.open("warehouse")              # doctest: +SKIP
    >>> wh.runs()                                     # doctest: +SKIP
    >>> wh.sql("select source, avg(accepted) from eval_positions group by source")  # doctest: +SKIP

Queries run as given, in the dataset's schema (the latest ingested one unless named), as
`specdraft sql` runs them; results are polars DataFrames (`.arrow()` for Arrow tables). The handle
never writes: the connection is DuckDB's read-only one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from specdraft.errors import SpecdraftError
from specdraft.warehouse.analysis import default_dataset
from specdraft.warehouse.connection import Warehouse

RUN_COLUMNS = ("run_id", "created_at", "dataset", "preset", "tokenizer", "selected_avg_accepted",
               "oracle_best_avg_accepted", "decode_step_avg_accepted", "eval_positions")


class WarehouseReader:
    """What specdraft.open returns; a context manager (or call close())."""

    def __init__(self, path: str | Path, dataset: str | None = None) -> None:
        root = Path(path)
        if not (root / "specdraft.duckdb").exists():
            raise SpecdraftError(f"{root}: no specdraft warehouse here (no specdraft.duckdb)")
        self._wh = Warehouse(root, read_only=True, memory_limit=None)
        self.dataset: str | None = None
        self.use(dataset or default_dataset(self._wh))

    def use(self, dataset: str | None) -> Self:
        """Query `dataset`'s tables by their plain names from now on."""
        if dataset is not None:
            if dataset not in self.datasets()["name"].to_list():
                raise SpecdraftError(f"no dataset {dataset!r} in this warehouse; see .datasets()")
            self._wh.use_dataset(dataset)
        self.dataset = dataset
        return self

    def sql(self, query: str, params: list | dict | None = None):
        """The query's rows as a polars DataFrame."""
        return self._relation(query, params).pl()

    def arrow(self, query: str, params: list | dict | None = None):
        """The query's rows as a pyarrow Table."""
        return self._relation(query, params).to_arrow_table()

    def runs(self):
        """Every recorded run, newest first: its id, dataset, preset and headline figures (the
        config and results JSON are main.runs' `config` and `results`)."""
        if not self._wh.has_table("runs", "main"):
            return self.sql(f"select {', '.join(f'null as {c}' for c in RUN_COLUMNS)} where false")
        return self.sql(f"select {', '.join(RUN_COLUMNS)} from main.runs order by created_at desc, run_id")

    def datasets(self):
        """Every dataset in the warehouse (main.datasets): name, traces file, tokenizer, traces."""
        return self._wh.query("warehouse/datasets").pl()

    def _relation(self, query: str, params: Any):
        relation = self._wh.run_text(query, params)
        if relation is None:
            raise SpecdraftError("the statement returns no rows (the handle is read-only: it runs queries)")
        return relation

    def close(self) -> None:
        self._wh.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<specdraft warehouse {self._wh.root} (dataset {self.dataset})>"


def open_warehouse(path: str | Path = "warehouse", dataset: str | None = None) -> WarehouseReader:
    """specdraft.open: a read-only handle on the warehouse at `path`."""
    return WarehouseReader(path, dataset)
