"""A read-only handle on a warehouse for notebooks: `specdraft.open(path)`.

    >>> import specdraft
    >>> wh = specdraft.open("warehouse")              # doctest: +SKIP
    >>> wh.runs()                                     # doctest: +SKIP
    >>> wh.sql("select source, avg(accepted) from eval_positions group by source")  # doctest: +SKIP

Queries run as given, in the dataset's schema (the latest ingested one unless named), as
`specdraft sql` runs them; results are polars DataFrames (`.arrow()` for Arrow tables). The handle
never writes: its connections are DuckDB's read-only ones, one per query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from specdraft.errors import SpecdraftError
from specdraft.warehouse.analysis import as_text_where_needed, default_dataset
from specdraft.warehouse.connection import Warehouse, fetched

RUN_COLUMNS = ("run_id", "created_at", "dataset", "preset", "tokenizer", "selected_avg_accepted",
               "oracle_best_avg_accepted", "decode_step_avg_accepted", "eval_positions")


class WarehouseReader:
    """What specdraft.open returns; a context manager (or call close()).

    Each call opens the warehouse for its one query and closes it, so that the handle never holds
    the file: a run can start while a notebook is open, and while it builds the handle answers
    from the state the run last committed (warehouse/snapshot.py)."""

    def __init__(self, path: str | Path, dataset: str | None = None) -> None:
        self.root = Path(path)
        if not (self.root / "specdraft.duckdb").exists():
            raise SpecdraftError(f"{self.root}: no specdraft warehouse here (no specdraft.duckdb)")
        self.dataset: str | None = None
        if dataset is None:
            with self._open() as wh:
                dataset = default_dataset(wh)
        self.use(dataset)

    def use(self, dataset: str | None) -> Self:
        """Query `dataset`'s tables by their plain names from now on."""
        if dataset is not None and dataset not in self.datasets()["name"].to_list():
            raise SpecdraftError(f"no dataset {dataset!r} in this warehouse; see .datasets()")
        self.dataset = dataset
        return self

    def sql(self, query: str, params: list | dict | None = None):
        """The query's rows as a polars DataFrame."""
        with self._open(self.dataset) as wh:
            # intervals, which polars cannot take, as `specdraft sql` shows them (Arrow keeps them)
            return fetched(lambda: as_text_where_needed(self._relation(wh, query, params), "table").pl())

    def arrow(self, query: str, params: list | dict | None = None):
        """The query's rows as a pyarrow Table."""
        with self._open(self.dataset) as wh:
            return fetched(lambda: self._relation(wh, query, params).to_arrow_table())

    def runs(self):
        """Every recorded run, newest first: its id, dataset, preset and headline figures (the
        config and results JSON are main.runs' `config` and `results`)."""
        with self._open() as wh:  # one connection for the check and the query
            if not wh.has_table("runs", "main"):
                query = f"select {', '.join(f'null as {c}' for c in RUN_COLUMNS)} where false"
            else:
                query = f"select {', '.join(RUN_COLUMNS)} from main.runs order by created_at desc, run_id"
            return self._relation(wh, query, None).pl()

    def datasets(self):
        """Every dataset in the warehouse (main.datasets): name, traces file, tokenizer, traces."""
        with self._open() as wh:
            return wh.query("warehouse/datasets").pl()

    def _open(self, dataset: str | None = None) -> Warehouse:
        return Warehouse(self.root, read_only=True, memory_limit=None, dataset=dataset)

    @staticmethod
    def _relation(wh: Warehouse, query: str, params: Any):
        relation = wh.run_text(query, params)
        if relation is None:
            raise SpecdraftError("the statement returns no rows (the handle is read-only: it runs queries)")
        return relation

    def close(self) -> None:
        """Nothing to release (each query opened and closed the warehouse); kept for `with`."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<specdraft warehouse {self.root} (dataset {self.dataset})>"


def open_warehouse(path: str | Path = "warehouse", dataset: str | None = None) -> WarehouseReader:
    """specdraft.open: a read-only handle on the warehouse at `path`."""
    return WarehouseReader(path, dataset)
