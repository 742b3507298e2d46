"""Stage 4: the n-gram tables, built in DuckDB from the traces Parquet.

    selected_traces (+ hash_powers) -> query_position_keys (calibration and eval keys)
                                         -> query_context_keys
                                    -> train_traces -> TrainKeys (train_keys.py, DuckDB: numpy)
                                       or position_keys (Spark: the train keys at every length)
        -> per context length: position_keys at that length (DuckDB: TrainKeys.at, scanned)
           -> length_keys -> length_continuations, length_next_tokens (views)
            -> exact_continuations, backoff_top_tokens
               (+ exact_continuation_counts, backoff_next_tokens with --keep-counts)

Every table comes from one file in sql/; Python only loops over the doubling steps of the
hash powers (log2 of the longest trace) and the context lengths, never over positions. On DuckDB
the train positions' keys are numpy arrays (train_keys.py: position_keys.sql's arithmetic without
its window sorts, one length's key at a time), and where the backoff walk will search its picks
in memory (numpy_picks) backoff_top_tokens is grouped from them in numpy (backoff_picks.py: the SQL
file's rows); on Spark, or where the keys would not fit in memory, they are position_keys.sql's
table. Elsewhere the SQL file groups backoff_top_tokens. An incremental update after
`specdraft ingest --append` (incremental.py) runs the same files over the appended traces alone.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Protocol

from specdraft.config import RunConfig
from specdraft.progress import progress
from specdraft.tables.backoff_picks import BYTES_PER_PICK, STORED_COMPRESSION, PicksAhead
from specdraft.tables.hashing import hash_params, inverse_params, power_params
from specdraft.tables.train_keys import TrainKeys, store_position_keys
from specdraft.warehouse.connection import Warehouse, trim_malloc_heap

BACKOFF_TABLE = "tables/backoff_top_tokens"


class Rows(Protocol):
    def fetchall(self) -> list[tuple]: ...


class TableBuilder(Protocol):
    """What the stage-4 build needs of an engine, and all it uses: warehouse.connection.Warehouse
    (DuckDB) and tables.spark.SparkTables (Spark) implement it."""

    def materialize(self, name: str, params: dict[str, Any] | None = None, *, append: bool = False,
                    temp: bool = False, view: bool = False, into: str | None = None) -> None:
        """Run sql/<name>.sql into its out table (or into=, another of the same grain): kept,
        temp=True an intermediate, view=True a view; append=True adds rows."""

    def query(self, name: str, params: dict[str, Any] | None = None) -> Rows:
        """Run sql/<name>.sql for its rows."""

    def drop(self, *tables: str) -> None:
        """Forget intermediates."""

    def drop_view(self, view: str) -> None: ...


def build_selected_traces(wh: TableBuilder, cfg: RunConfig, traces_path: Path, from_trace_id: int = 0) -> None:
    """The selected traces, or (from_trace_id > 0) add those from that trace on."""
    wh.materialize(
        "tables/selected_traces",
        {
            "traces_path": str(traces_path),
            "train_limit": cfg.train_limit,
            "calibration_limit": cfg.calibration_limit,
            "eval_limit": cfg.eval_limit,
            "max_completion_tokens": cfg.max_completion_tokens,
            "from_trace_id": from_trace_id,
        },
        append=from_trace_id > 0,
    )


def build_hash_powers(wh: TableBuilder) -> None:
    """B^pos and B^-pos for every position of the longest trace, by doubling."""
    wh.materialize("tables/hash_powers_start", temp=True)
    longest = max((row[4] for row in wh.query("tables/trace_stats").fetchall()), default=0)
    span = 1
    while span < longest:
        params = {"span": span, **power_params(span), **inverse_params(span), **hash_params()}
        wh.materialize("tables/hash_powers", params, append=True)
        span *= 2


def table_lengths(cfg: RunConfig) -> list[int]:
    """The lengths the n-gram and backoff tables are built at (train positions' keys)."""
    return sorted({*cfg.context_lengths, *cfg.backoff_context_lengths})


def query_lengths(cfg: RunConfig) -> list[int]:
    """The lengths the copy and n-gram sources look calibration and eval contexts up at."""
    return sorted({*cfg.context_lengths, *cfg.copy_context_lengths})


def _position_params(cfg: RunConfig, from_trace_id: int) -> dict[str, Any]:
    tail = power_params(cfg.draft_len - 1)
    return {
        "draft_len": cfg.draft_len,
        "from_trace_id": from_trace_id,
        "max_index_positions": cfg.max_index_positions,
        "backoff_max_index_positions": cfg.backoff_max_index_positions,
        "tail1": tail["pow1"],
        "tail2": tail["pow2"],
        **inverse_params(1),
        **hash_params(),
    }


def build_position_keys(wh: TableBuilder, cfg: RunConfig, from_trace_id: int = 0) -> TrainKeys | None:
    """The positions and context keys of the selected traces from from_trace_id on: calibration's
    and eval's at the query lengths (query_position_keys), train's at the table lengths
    (build_train_keys, returned); the hash powers they were made with are dropped."""
    wh.materialize("tables/position_keys",
                   {**_position_params(cfg, from_trace_id), "train": False, "ctx_len": query_lengths(cfg)},
                   into="query_position_keys", temp=True)
    keys = build_train_keys(wh, cfg, from_trace_id)
    wh.drop("hash_powers")
    return keys


def build_train_keys(wh: TableBuilder, cfg: RunConfig, from_trace_id: int = 0) -> TrainKeys | None:
    """The train positions from from_trace_id on and their keys at the table lengths (hash_powers
    built). On DuckDB they are returned (TrainKeys, for build_per_length), unless they would not fit
    in the memory budget beside DuckDB's share (TrainKeys.fit_beside); there (made a chunk of traces
    at a time, store_position_keys), and on Spark (position_keys.sql), they are the position_keys
    table, which DuckDB spills past its limit, and None is returned."""
    if isinstance(wh, Warehouse):
        caps = (cfg.draft_len, cfg.max_index_positions, cfg.backoff_max_index_positions)
        keys = None
        if TrainKeys.fit_beside(wh, from_trace_id):
            keys = TrainKeys.build(wh, *caps, from_trace_id)
        else:
            store_position_keys(wh, *caps, table_lengths(cfg), from_trace_id)
        trim_malloc_heap()  # the build's freed temporaries: 226 MB on the development set
        return keys
    wh.materialize("tables/position_keys",
                   {**_position_params(cfg, from_trace_id), "train": True, "ctx_len": table_lengths(cfg)}, temp=True)
    return None


COUNT_TABLES = ("exact_continuation_counts", "backoff_next_tokens")  # kept with --keep-counts only


def count_tables(cfg: RunConfig) -> list[tuple[str, tuple[int, ...], dict]]:
    """The full count tables, built one context length at a time: (sql/ name, lengths, parameters)."""
    return [("tables/exact_continuation_counts", cfg.context_lengths, {}),
            ("tables/backoff_next_tokens", cfg.backoff_context_lengths, {})]


def length_tables(cfg: RunConfig) -> list[tuple[str, tuple[int, ...], dict]]:
    """Every table built one context length at a time: the top continuations and backoff picks,
    and with --keep-counts the full counts (what an update after `ingest --append` merges into)."""
    tables = [
        ("tables/exact_continuations", cfg.context_lengths, {"top_k": cfg.max_continuations_per_context}),
        (BACKOFF_TABLE, cfg.backoff_context_lengths, {}),
    ]
    return tables + count_tables(cfg) if cfg.keep_counts else tables


def build_per_length(wh: TableBuilder, tables: list[tuple[str, tuple[int, ...], dict]], into=None,
                     keys: TrainKeys | None = None, queried: bool = False) -> None:
    """For each context length, every table of that length from the train positions' keys at it
    (position_keys through the length_keys view and the counts over it), appended. Each grouping
    is one length's share of the whole, so large builds stay within the memory limit. into(name)
    names the table a file writes to instead of its own (an update's delta tables). keys (DuckDB):
    the train positions, scanned as position_keys at each length in turn (Warehouse.scanning: each
    length's keys go when its tables are written); without them, the position_keys table.
    queried: the continuations are counted for the contexts of the wanted_contexts view only
    (--ngram-contexts queried), the positions of other contexts dropped before they are grouped.

    With keys, where the walk will search the backoff picks in memory, backoff_top_tokens is made
    from the keys in numpy (backoff_picks.py), beside DuckDB's work on the length, and written in
    key order, which the walk then reads without sorting (numpy_picks)."""
    lengths = sorted({length for _, table_lengths, _ in tables for length in table_lengths})
    started: set[str] = set()
    numpy_lengths = [length for length in lengths for name, table_lengths, _ in tables
                     if name == BACKOFF_TABLE and length in table_lengths]
    if not (keys is not None and not into and numpy_picks(wh, len(keys), len(numpy_lengths))):
        numpy_lengths = []  # grouped by the SQL file
    # the next length's keys are hashed (numpy, which lets go of the GIL) while DuckDB builds this
    # one's tables, and so are the backoff picks (PicksAhead)
    with ThreadPoolExecutor(max_workers=1) as ahead, PicksAhead(keys, numpy_lengths) as backoff_picks:
        upcoming = ahead.submit(keys.at, lengths[0]) if keys is not None and lengths else None
        for i, ctx_len in enumerate(progress(lengths, desc="n-gram tables", unit="length")):
            backoff_picks.reach(ctx_len)
            scans = nullcontext()
            if upcoming is not None:
                scans = wh.scanning(position_keys=upcoming.result())
                upcoming = ahead.submit(keys.at, lengths[i + 1]) if i + 1 < len(lengths) else None
            with scans:
                # views, made again for each length (a Spark view holds the plan it was made from)
                for view in ("tables/length_keys", "tables/length_next_tokens"):
                    wh.materialize(view, {"ctx_len": ctx_len}, view=True)
                if queried:
                    wh.materialize("tables/length_contexts", {"ctx_len": ctx_len}, temp=True)
                    wh.materialize("tables/queried_length_continuations", view=True, into="length_continuations")
                else:
                    wh.materialize("tables/length_continuations", view=True)
                for name, table_lengths, params in tables:
                    if ctx_len not in table_lengths:
                        continue
                    if name == BACKOFF_TABLE and numpy_lengths:
                        rows = backoff_picks.take(ctx_len).as_table(ctx_len)
                        wh.store("backoff_top_tokens", rows, append=name in started, compression=STORED_COMPRESSION)
                        del rows
                        trim_malloc_heap()  # the picks' freed temporaries, kept by their thread's heap
                    else:
                        target = {"into": into(name), "temp": True} if into else {}
                        wh.materialize(name, {**params, "ctx_len": ctx_len}, append=name in started, **target)
                    started.add(name)
    for view in ("length_next_tokens", "length_continuations", "length_keys"):
        wh.drop_view(view)
    if queried:
        wh.drop("length_contexts")


def numpy_picks(wh: Warehouse, positions: int, lengths: int) -> bool:
    """Is backoff_top_tokens grouped in numpy from the train keys in memory? Where the walk will
    search its picks in memory: at most one a train position and length, they fit beside DuckDB
    (LengthPicks.fit_beside's room). There, rows in key order spare the walk its sort (the
    figures are in backoff_picks.py). The grouping itself is on one thread against DuckDB's two,
    as fast on the development set but not beyond: on all 25,676 train rows (whose picks the walk
    joins) the n-gram stage took 23.2 s against 17.5 s in SQL."""
    return wh.fits_beside_duckdb(positions * lengths * BYTES_PER_PICK)


def build_ngram_tables(wh: TableBuilder, cfg: RunConfig, traces_path: Path) -> None:
    """Build every stage-4 table. Intermediates are temp tables; what analysts and later stages
    read (selected_traces, query_context_keys, exact_continuations, backoff_top_tokens, and with
    --keep-counts exact_continuation_counts and backoff_next_tokens) is kept. exact_continuations
    ranks the contexts calibration and eval look up (query_context_keys), or with
    --ngram-contexts all (or --keep-counts) every train context."""
    build_selected_traces(wh, cfg, traces_path)
    build_hash_powers(wh)
    keys = build_position_keys(wh, cfg)
    wh.materialize("tables/query_context_keys", {"ctx_len": query_lengths(cfg)})
    wh.drop("query_position_keys")
    queried = cfg.ranks_queried_contexts
    wh.materialize("tables/exact_continuation_scope", {
        "contexts": "queried" if queried else "all",
        "draft_len": cfg.draft_len,
        "max_index_positions": cfg.max_index_positions,
        "max_continuations_per_context": cfg.max_continuations_per_context,
    })
    if queried:
        wh.materialize("tables/wanted_contexts", view=True)
    build_per_length(wh, length_tables(cfg), keys=keys, queried=queried)
    if queried:
        wh.drop_view("wanted_contexts")
    if keys is None:
        wh.drop("position_keys")


def ranks_every_context(wh: Warehouse) -> bool:
    """Does the warehouse's exact_continuations rank every train context? (A build from before
    exact_continuation_scope did.)"""
    return ranking_settings(wh) is None


RANKING_SETTINGS = ("draft_len", "max_index_positions", "max_continuations_per_context")


def ranking_settings(wh: Warehouse) -> dict | None:
    """The settings a queried exact_continuations was ranked with (RANKING_SETTINGS, those the
    table recorded); None where it ranks every context."""
    if not wh.has_table("exact_continuation_scope"):
        return None
    (row,) = wh.query("tables/ranked_contexts").to_arrow_table().to_pylist()
    if row.pop("contexts") == "all":
        return None
    return {name: row[name] for name in RANKING_SETTINGS if name in row}


def rank_continuations_here(wh: Warehouse, cfg: RunConfig, top_k: int, wanted: bool = False) -> None:
    """exact_continuations of the selected train traces as a temp table of that name, which this
    connection reads instead of the warehouse's (also on a read-only warehouse): over every train
    context (what a bundle needs: a live prompt may hit any), or with wanted=True over those of
    the wanted_contexts table the caller registered (`specdraft lookup`'s text). For warehouses
    whose own table ranks only the queried contexts (ranks_every_context)."""
    build_hash_powers(wh)
    keys = build_train_keys(wh, cfg)
    wh.drop("hash_powers")
    with wh.uncached():
        build_per_length(wh, [("tables/exact_continuations", cfg.context_lengths, {"top_k": top_k})],
                         into=lambda _: "exact_continuations", keys=keys, queried=wanted)
    if keys is None:
        wh.drop("position_keys")


def index_counters(wh: Warehouse, cfg: RunConfig) -> dict[str, int]:
    """The seed's exact_positions_added and backoff_positions_added."""
    params = {
        "draft_len": cfg.draft_len,
        "max_index_positions": cfg.max_index_positions,
        "backoff_max_index_positions": cfg.backoff_max_index_positions,
    }
    (exact, backoff), = wh.query("tables/index_counters", params).fetchall()
    return {"exact_positions_added": int(exact), "backoff_positions_added": int(backoff)}
