"""The one module that owns the DuckDB connection and runs the files in sql/ (sql_files.py).

`Warehouse.materialize` wraps the query into `create table` / `insert into`, binds the
parameters, times it, logs it, and re-raises failures with the file name. The exceptions are the
MERGE statements of incremental updates (sql/tables/incremental/), which `Warehouse.apply` runs
as written, and an analyst's own SQL (`Warehouse.run_text`). Nothing else in specdraft touches
the connection (tests/test_layout.py checks).
"""

from __future__ import annotations

import copy
import ctypes
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Self

import duckdb
import pyarrow
import pyarrow.parquet

from specdraft.errors import SpecdraftError, first_line
from specdraft.failpoints import reach
from specdraft.files import make_dirs, sweep_partials
from specdraft.warehouse import snapshot
from specdraft.warehouse.lock import LOCK_FILE, WriterLock
from specdraft.warehouse.sql_files import SqlFile, load_sql

DB_FILE = "specdraft.duckdb"
# How long a writer waits for readers that opened the warehouse file before it started (each of
# them holds it for one query; specdraft.open's handle opens it per query too).
READERS_WAIT_S = 30.0
READERS_POLL_S = 0.05


def default_memory_limit() -> str:
    """A quarter of physical RAM, in whole GB (at least 1GB): DuckDB's own default is 80% of RAM,
    which leaves too little on a small machine shared with other work."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, ram // 4 // 1024**3)}GB"


SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(|K|M|G|T)(i?)B?\s*$", re.IGNORECASE)
# --memory-limit is the run's budget. DuckDB's buffer pool gets this share of it; the rest is for
# what DuckDB does not count (its untracked allocations) and the Python side (the tokenizer,
# numpy walks, the confidence model, Arrow results). Measured on a 200,000-trace build: the
# process peaked about 1.7 GB above DuckDB's limit.
DUCKDB_SHARE = 0.7
# store_spilled's files, in the warehouse's tmp/ beside DuckDB's own spill files
SPILL_SUFFIX = ".spill.parquet"
SPILL_ROW_GROUP = 1 << 20  # rows: DuckDB's threads scan the file a row group each


def size_bytes(size: str) -> int:
    """A size as DuckDB writes it: 5GB = 5 * 1000^3, 5GiB = 5 * 1024^3.

    >>> size_bytes("5GB"), size_bytes("512MiB"), size_bytes("1.5 gb")
    (5000000000, 536870912, 1500000000)
    """
    match = SIZE.match(size)
    if not match:
        raise SpecdraftError(f"memory limit {size!r}: expected a size like 4GB or 512MB")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    return int(float(number) * base ** " KMGT".index(unit.upper() or " "))


def duckdb_memory_limit(budget: str) -> str:
    """DuckDB's share of the run's memory budget.

    >>> duckdb_memory_limit("5GB")
    '3500MB'
    """
    return f"{max(1, int(size_bytes(budget) * DUCKDB_SHARE) // 1000**2)}MB"


DEFAULT_MEMORY_LIMIT = default_memory_limit()
# What uncached() lets DuckDB's cache of table blocks grow to before emptying it. Emptying it also
# gives the allocator's pages back, which the next statement faults in again: emptied after every
# statement, the n-gram tables of the development set took 19.4 s instead of 17.6 s (3 runs
# each); with 48 MB allowed, as long as never emptied (within this machine's noise) with a peak
# of 0.75 GB instead of 1.23 GB.
CACHE_ALLOWANCE = 48 * 1024**2
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
log = logging.getLogger("specdraft.sql")
# What _execute_scanning evaluates in a frame whose locals are the tables to scan.
_EXECUTE = compile("_con.execute(_statement, _bound).fetchall()", "<specdraft scan>", "eval")


_SAID_BUILDING: set[tuple[Path, str]] = set()  # (warehouse, writer) a reader here has warned of


def release_unused_memory() -> None:
    """Give back the pages the process's allocators keep after frees: Arrow's (its tables' freed
    buffers) and the C heap's (trim_malloc_heap)."""
    pyarrow.default_memory_pool().release_unused()
    trim_malloc_heap()


def trim_malloc_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing).
    numpy's arrays of a few MB come from that heap once glibc has raised its mmap threshold, and
    their pages stay with the process when freed: building the development set's train keys
    (train_keys.py) left 226 MB there, which DuckDB, allocating apart, cannot reuse."""
    malloc_trim = _glibc_malloc_trim()
    if malloc_trim is not None:
        malloc_trim(0)


@cache
def _glibc_malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def quote_identifier(name: str) -> str:
    """Quote a table or column name after checking it against a fixed pattern.

    >>> quote_identifier("exact_continuations")
    '"exact_continuations"'
    """
    if not IDENTIFIER.match(name):
        raise SpecdraftError(f"invalid identifier {name!r}: use letters, digits and underscores")
    return f'"{name}"'


# Statements a read-only connection would still run that write outside the database file (COPY
# ... TO, EXPORT DATABASE, COPY FROM DATABASE) or could: ATTACH opens another database writable
# (the readers' snapshot among them), and PREPARE / EXECUTE run a statement not checked here.
# EXPLAIN ANALYZE runs the statement it explains, which is checked in turn (read_only_refusal), and
# the settings that name a file DuckDB writes (a query log, a profile) are refused by name.
READ_ONLY_REFUSED = (duckdb.StatementType.COPY, duckdb.StatementType.EXPORT, duckdb.StatementType.COPY_DATABASE,
                     duckdb.StatementType.ATTACH, duckdb.StatementType.DETACH, duckdb.StatementType.PREPARE,
                     duckdb.StatementType.EXECUTE)
_ANALYZED = re.compile(r"\banaly[sz]e\b(.*)", re.IGNORECASE | re.DOTALL)
_FILE_SETTINGS = re.compile(r"\b(log_query_path|profiling_output|profile_output)\b", re.IGNORECASE)
# Schema names a dataset cannot take: the warehouse's catalog (runs, datasets) is in main, and
# DuckDB's own names would be ambiguous (temp) or refused (system); the database's own name too.
RESERVED_SCHEMAS = ("main", "temp", "system", "information_schema", "pg_catalog", Path(DB_FILE).stem)


def check_dataset_name(name: str) -> str:
    """`name`, unless the warehouse or DuckDB holds a schema of that name, which a dataset's
    tables cannot take (use_dataset then quotes it, which checks its characters).

    >>> check_dataset_name("gsm8k")
    'gsm8k'
    """
    if name.lower() in RESERVED_SCHEMAS:
        raise SpecdraftError(f"dataset name {name!r} is reserved (the warehouse's catalog or DuckDB's own: "
                             f"{', '.join(RESERVED_SCHEMAS)}); choose another with --name")
    return name


def check_warehouse_path(root: Path) -> None:
    """A path DuckDB can open a warehouse under: one with '?' it reads the rest of as options (its
    write-ahead log went elsewhere and the run failed with a traceback)."""
    if "?" in str(root):
        raise SpecdraftError(f"{root}: a warehouse path cannot hold '?' (DuckDB cannot open a database there); "
                             "choose another --warehouse")


def read_only_refusal(text: str) -> str | None:
    """The type of the first statement of `text` that a read-only warehouse refuses
    (READ_ONLY_REFUSED), or None.

    >>> read_only_refusal("select 1; /* x */ explain analyze copy (select 1) to 'x.csv'")
    'COPY'
    >>> read_only_refusal("explain select 1"), read_only_refusal("explain analyze select 1")
    (None, None)
    >>> read_only_refusal("set log_query_path = 'x.duckdb'"), read_only_refusal("pragma table_info('runs')")
    ('SET', None)
    """
    for statement in duckdb.extract_statements(text):
        if statement.type in READ_ONLY_REFUSED:
            return statement.type.name
        if statement.type in (duckdb.StatementType.SET, duckdb.StatementType.PRAGMA) \
                and _FILE_SETTINGS.search(statement.query):
            return statement.type.name
        analyzed = _ANALYZED.search(statement.query) if statement.type == duckdb.StatementType.EXPLAIN else None
        if analyzed:
            try:
                inner = read_only_refusal(analyzed.group(1))
            except duckdb.Error:  # not an EXPLAIN ANALYZE this can read: not run
                inner = statement.type.name
            if inner:
                return inner
    return None


def fetched(fetch: Callable[[], Any]) -> Any:
    """fetch()'s result, for an analyst's SQL: a DuckDB error, whether parsing, binding (run_text)
    or as the rows are read (a failed cast, error()), as one line, `query failed: ...`."""
    try:
        return fetch()
    except duckdb.Error as exc:
        raise SpecdraftError(f"query failed: {first_line(exc)}") from exc


@dataclass
class Warehouse:
    """A warehouse directory: traces Parquet files plus one DuckDB file of tables."""

    root: Path
    read_only: bool = False
    debug: bool = False
    memory_limit: str | None = DEFAULT_MEMORY_LIMIT
    # Each dataset's tables live in a schema named after it; runs and the catalog live in main.
    dataset: str | None = None
    con: duckdb.DuckDBPyConnection | None = None
    snapshot: bool = field(default=False, init=False)  # a reader answering from the snapshot
    _copy: snapshot.Copy | None = field(default=None, init=False, repr=False)  # the writer's copy for readers
    _uncached: bool = field(default=False, init=False, repr=False)  # see uncached()
    _scans: dict[str, Any] = field(default_factory=dict, init=False, repr=False)  # see scanning()
    _spilled: dict[str, Path] = field(default_factory=dict, init=False, repr=False)  # see store_spilled()
    _reader_spill: tempfile.TemporaryDirectory | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        check_warehouse_path(self.root)
        if not self.read_only:
            make_dirs(self.root)
            (self.root / "traces").mkdir(exist_ok=True)
        db_path = self.root / DB_FILE
        if self.read_only and not db_path.exists():
            raise SpecdraftError(f"{db_path}: no warehouse here; run `specdraft run` first")
        if not self.read_only:
            snapshot.Copy.wait_for_pending()  # this process's last writer may still hold the lock
            self._lock = WriterLock(self.root / LOCK_FILE)
        try:
            self.con = self._connect_reader(db_path) if self.read_only else self._connect_writer(db_path)
        except duckdb.IOException as exc:
            self._release_lock()
            holder = WriterLock.holder(self.root / LOCK_FILE)
            if holder:
                raise SpecdraftError(f"{self.root}: warehouse is busy ({holder})") from exc
            raise SpecdraftError(f"{db_path}: warehouse is unreadable ({first_line(exc)})") from exc
        try:
            self._set_up()
        except BaseException:  # (a dataset refused, say): the connection and the lock go with it
            self.close()
            raise

    def _set_up(self) -> None:
        """The new connection's settings, and the dataset's schema current (__post_init__)."""
        db_path = self.root / DB_FILE
        if not self.read_only:
            self.con.execute("set temp_directory = ?", [str(self.root / "tmp")])
            for stale in (self.root / "tmp").glob(f"*{SPILL_SUFFIX}"):  # a killed writer's (this one holds the lock)
                stale.unlink()
            sweep_partials(self.traces_dir)  # a killed ingest's or append's traces file
            # only publish_snapshot checkpoints, never while it copies (snapshot.py)
            self.con.execute("set checkpoint_threshold = '1000TB'")
            # Nor does it vacuum: the warehouse deletes no rows (it replaces tables), so what a
            # checkpoint's vacuum would do is merge the partial row groups that parallel inserts
            # leave, compressing them again. On the development set (--preset default) that took
            # the checkpoint after the candidates stage 0.72-0.81 s against 0.14 s, and the one
            # after the run's record 0.31-0.38 s against 0.03 s; runs took 15.3-16.3 s against
            # 14.8-15.5 s in process (3 alternated pairs).
            self.con.execute("set max_vacuum_tasks = 0")
            if not snapshot.is_current(db_path):  # readers of the build to come read this state:
                self.publish_snapshot()  # copied now (the first commit, seconds away, would give
                self._wait_for_copy()    # the copy up, and stages commit faster than QUIET_S)
        if self.memory_limit:
            self.con.execute("set memory_limit = ?", [duckdb_memory_limit(self.memory_limit)])
        if self.dataset:
            self.use_dataset(self.dataset)

    def _connect_reader(self, db_path: Path) -> duckdb.DuckDBPyConnection:
        """The warehouse file read-only; while a writer holds it, the state it last committed
        (snapshot.py)."""
        try:
            return duckdb.connect(str(db_path), read_only=True)
        except duckdb.IOException:
            copy = snapshot.snapshot_path(self.root)
            writer = WriterLock.holder(self.root / LOCK_FILE)
            if not writer:  # its writer ended between the two looks (it closes the file first)
                return duckdb.connect(str(db_path), read_only=True)
            if not copy.exists():
                raise
        self.snapshot = True
        if (self.root, writer) not in _SAID_BUILDING:  # once per run, not per query (compare opens 5 times)
            _SAID_BUILDING.add((self.root, writer))
            log.warning("%s: a run is building (%s); reading the state it last committed", self.root, writer)
        return duckdb.connect(str(copy), read_only=True)

    def _connect_writer(self, db_path: Path) -> duckdb.DuckDBPyConnection:
        """The warehouse file read-write, once the readers that have it open (one query each)
        are done: up to READERS_WAIT_S."""
        waited = 0.0
        while True:
            try:
                return duckdb.connect(str(db_path))
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                if waited >= READERS_WAIT_S:
                    self._release_lock()
                    raise SpecdraftError(f"{self.root}: warehouse is busy: other processes have held it open "
                                         f"for {READERS_WAIT_S:.0f} s ({first_line(exc)})") from exc
            time.sleep(READERS_POLL_S)
            waited += READERS_POLL_S

    def publish_snapshot(self) -> None:
        """Let readers see what is committed now: checkpoint (the WAL into the file), then copy the
        file to the snapshot beside the work that follows, once the writer has gone snapshot.QUIET_S
        seconds without committing again or closes (snapshot.py). A copy of an earlier commit not
        ended is given up rather than waited for: it would be out of date when done, and waiting
        for it cost the seed preset's run 0.9 s (its last stages commit within a second)."""
        self._stop_copy()
        started = time.perf_counter()
        self.con.execute("checkpoint")
        self._copy = snapshot.Copy(self.root / DB_FILE, self._lock.fileno())
        log.debug("checkpointed in %.2fs; copying for readers", time.perf_counter() - started)

    def _stop_copy(self) -> None:
        """No copy runs: one of an earlier commit is given up (before DuckDB checkpoints, which may
        write over the blocks it copies)."""
        if self._copy is not None:
            self._copy.stop()
            self._copy = None

    def _wait_for_copy(self) -> None:
        """The snapshot's copy, if one runs, finished: before DuckDB closes with a WAL, which it
        checkpoints (writing over the blocks being copied)."""
        if self._copy is not None:
            started = time.perf_counter()
            self._copy.wait()
            self._copy = None
            log.debug("waited %.2fs for the snapshot's copy", time.perf_counter() - started)

    def use_dataset(self, name: str) -> None:
        """Make `name`'s schema the current one: unqualified table names resolve (and are created) there."""
        schema = quote_identifier(check_dataset_name(name))
        if not self.read_only:
            twin = self.con.execute(
                "select schema_name from information_schema.schemata where catalog_name = current_database() "
                "and lower(schema_name) = lower(?) and schema_name <> ?", [name, name]).fetchall()
            if twin:  # DuckDB's names ignore case: the two would be one schema, one dataset's tables the other's
                raise SpecdraftError(f"dataset {name!r} would share its tables with dataset {twin[0][0]!r} (the "
                                     "warehouse's names ignore case): use that name, or one that differs in more "
                                     "than case")
            self.con.execute(f"create schema if not exists {schema}")
        elif not self.has_schema(name):
            raise SpecdraftError(f"{self.root / DB_FILE}: no dataset {name!r} in this warehouse")
        self.con.execute(f"use {schema}")
        self.dataset = name

    def has_schema(self, name: str) -> bool:
        rows = self.con.execute(
            "select count(*) from information_schema.schemata where schema_name = ?", [name]
        ).fetchall()
        return bool(rows[0][0])

    def create_text_macro(self) -> None:
        """as_text(token_ids): a token list rendered as text through the current dataset's vocab
        (qualified, so it works from any schema: gsm8k.as_text(...)). The tokens' bytes are decoded
        together, so a character split over several tokens (an emoji, most CJK) is itself; a list
        that starts or ends inside a character, which is no UTF-8, is the tokens' pieces joined,
        with U+FFFD for each partial character."""
        schema = quote_identifier(self.dataset or "main")
        self.con.execute(
            f"create or replace macro {schema}.as_text(token_ids) as ("
            f"select coalesce(try(decode(list_reduce(bytes, lambda a, b: a || b))), pieces, '') from ("
            f"select list(v.bytes order by t.i) as bytes, string_agg(v.piece, '' order by t.i) as pieces "
            f"from (select unnest(token_ids) as token_id, unnest(generate_series(1, len(token_ids))) as i) as t "
            f"join {schema}.vocab as v using (token_id)))"
        )

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    @contextmanager
    def outside_transaction(self):
        """This warehouse on a second connection to its database (a DuckDB cursor) that reads
        committed tables only, outside this connection's transaction: for many small statements
        over Arrow tables registered from Python. Inside a transaction DuckDB keeps every table
        registered in it alive until the transaction ends, unregistered or not (the backoff walk's
        16 steps of probes held 200 MB until the candidates stage committed); outside, each goes
        when its statement is done."""
        other = copy.copy(self)
        other.con = self.con.cursor()
        other._lock = None
        other.read_only = True  # nothing is written there
        other._uncached = False
        other._copy = None  # the writer's
        other._scans = {}
        other._spilled, other._reader_spill = {}, None  # this connection's files stay this one's
        try:
            if self.dataset:
                other.use_dataset(self.dataset)
            yield other
        finally:
            other.con.close()

    @contextmanager
    def uncached(self):
        """Inside the block each materialize (of a table) and store empties DuckDB's cache of
        table blocks when done, once it holds more than CACHE_ALLOWANCE (release_cached_memory):
        for a stage of many statements, whose blocks would otherwise pile up in the cache, so
        that its peak is about one statement's working set and what the statements share (temp
        tables stay in memory)."""
        self._uncached = True
        try:
            yield
        finally:
            self._uncached = False

    def _statement_done(self) -> None:
        if self._uncached:
            self.release_cached_memory(over=CACHE_ALLOWANCE)

    def release_cached_memory(self, over: int = 0) -> None:
        """Give back the memory DuckDB keeps between statements, if its cache of table blocks holds
        more than `over` bytes: the blocks of stored tables it has read or written, which it
        caches up to its memory limit (they are on disk, in the database file or the
        transaction's own writes, and are read again when needed), and the pages its allocator
        keeps after a statement. Lowering the limit to what is in use less those blocks evicts
        them and them only (temp tables are not evicted: they would spill to disk); the limit is
        then set back. Arrow's allocator keeps freed pages too (123 MB after ingesting the
        development set), which DuckDB, allocating apart, cannot reuse: they go as well."""
        usage = dict(self.con.execute("select tag, memory_usage_bytes from duckdb_memory()").fetchall())
        cached = usage.get("BASE_TABLE", 0)
        if cached <= over and over:
            return
        if cached:
            keep = sum(usage.values()) - cached + 1024**2
            limit = self.con.execute("select current_setting('memory_limit')").fetchall()[0][0]
            try:
                self.con.execute("set memory_limit = ?", [f"{keep // 1024}KB"])
            except duckdb.Error:  # pinned blocks above the lower limit: evicting what it could is enough
                pass
            finally:
                self.con.execute("set memory_limit = ?", [limit])
        release_unused_memory()

    def close(self) -> None:
        for path in self._spilled.values():  # a build that failed before it dropped them
            path.unlink(missing_ok=True)
        self._spilled = {}
        if self._reader_spill is not None:
            self._reader_spill.cleanup()
            self._reader_spill = None
        if self.con is not None:
            if snapshot.has_wal(self.root / DB_FILE):
                self._wait_for_copy()  # closing checkpoints the WAL: not while a copy runs
            elif self._copy is not None:
                self._copy.start()  # now, not after QUIET_S: it needs the lock, let go below
            self._copy = None
            self.con.close()
            self.con = None
        self._release_lock()  # a copy still running holds the lock until it is in

    def _release_lock(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
            self._lock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running sql/ files -------------------------------------------------------------
    def _execute(self, sql_file: SqlFile, statement: str, params: dict[str, Any], lazy: bool = False):
        missing = set(sql_file.used_params) - set(params)
        if missing:
            raise SpecdraftError(f"{sql_file.path.name}: missing parameters {sorted(missing)}")
        bound = {name: params[name] for name in sql_file.used_params}
        if self.debug:
            log.debug("-- %s %s\n%s", sql_file.path.name, bound, statement)
        started = time.perf_counter()
        try:
            # A relation (con.sql) keeps ORDER BY in Arrow output; a DB-API result's Arrow
            # output in DuckDB 2.0 may not.
            if lazy:
                result = self.con.sql(statement, params=bound or None)
            else:
                result = self._execute_scanning(statement, bound, self._scans)
        except duckdb.Error as exc:
            raise self._sql_error(sql_file, statement, exc) from exc
        log.debug("%s took %.2fs", sql_file.path.name, time.perf_counter() - started)
        return result

    def _sql_error(self, sql_file: SqlFile, statement: str, exc: duckdb.Error) -> SpecdraftError:
        """One line naming the file; under --debug, the whole statement as run and DuckDB's whole
        error (with its LINE and caret), as splink reports a failing statement."""
        where = f"{sql_file.name}.sql"
        if not self.debug:
            hint = f"; raise --memory-limit (DuckDB gets {DUCKDB_SHARE:.0%} of it)" if isinstance(
                exc, duckdb.OutOfMemoryException) else ""
            return SpecdraftError(f"{where}: {first_line(exc)}{hint}")
        return SpecdraftError(
            f"{where}: error executing the following SQL for table {sql_file.out}:\n{statement.strip()}\n\n"
            f"{type(exc).__name__}: {exc}"
        )

    def run_text(self, text: str, params: list | dict | None = None, all_or_nothing: bool = False):
        """SQL text as given, with optional bound parameters: an analyst's own (`specdraft sql`), or
        a test's. The relation (run when read), None for a statement without a result. The only SQL
        run here that is not a sql/ file. Read-only, statements that write files are refused too:
        DuckDB's read-only mode guards the database file, not a COPY over the traces Parquet.
        all_or_nothing (writable, outside any transaction): the statements in one transaction."""
        if params is not None and not isinstance(params, list | tuple | dict):
            raise SpecdraftError(f"query parameters must be a list, tuple or dict, not {type(params).__name__}")

        def run():
            if self.read_only:
                refused = read_only_refusal(text)
                if refused:
                    raise SpecdraftError(f"{refused} writes files or databases, or runs a statement unchecked; the "
                                         "warehouse is open read-only (`specdraft sql --write` may write)")
                return self.con.sql(text, params=params)
            return self._run_all_or_nothing(text, params) if all_or_nothing else self.con.sql(text, params=params)

        return fetched(run)

    def _run_all_or_nothing(self, text: str, params):
        """Writable SQL text (`specdraft sql --write`) in one transaction: a statement that fails
        leaves the warehouse as it was, not with the statements before it done. Text that handles
        its own transactions (BEGIN, COMMIT), or a CHECKPOINT or VACUUM, runs as given."""
        statements = duckdb.extract_statements(text)
        # (a CHECKPOINT or VACUUM cannot run inside one that has changed something)
        if any(s.type in (duckdb.StatementType.TRANSACTION, duckdb.StatementType.VACUUM, duckdb.StatementType.CALL)
               for s in statements):
            return self.con.sql(text, params=params)
        self.con.execute("begin transaction")
        try:
            for statement in statements[:-1]:
                self.con.execute(statement)
            relation = self.con.sql(statements[-1].query, params=params) if statements else None
            rows = None if relation is None else relation.to_arrow_table()  # (read inside the transaction)
        except BaseException:
            self.con.execute("rollback")
            raise
        self.con.execute("commit")
        return None if rows is None else self.con.from_arrow(rows)

    def materialize(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        append: bool = False,
        temp: bool = False,
        view: bool = False,
        schema: str | None = None,
        persistent_view: bool = False,
        into: str | None = None,
        compression: dict[str, str] | None = None,
    ) -> None:
        """Run `sql/<name>.sql` into its `out` table: replace it, or append rows.

        temp=True keeps a build intermediate in memory (spilling to the warehouse's tmp/), out of
        the warehouse file. view=True makes a temporary view, and with persistent_view=True one
        kept in the warehouse: its parameters are written into it as literals. into= writes to
        another table of the same grain instead of `out` (an incremental update's delta).
        compression: how a new table stores some of its columns (see store).
        """
        if compression and (view or persistent_view):
            raise SpecdraftError(f"{name}: a view stores nothing to compress")
        sql_file = load_sql(name).expanded(params or {})
        if (view or persistent_view) and params:
            sql_file, params = sql_file.with_values(params), {}
        target = quote_identifier(into or sql_file.out)
        if schema:
            target = f"{quote_identifier(schema)}.{target}"
        if append:
            statement = f"insert into {target} by name\n{sql_file.text}"
        elif compression:
            columns = self._execute(sql_file, f"describe\n{sql_file.text}", params or {})
            self._create_with(target, columns, compression, temp=temp)
            statement = f"insert into {target} by name\n{sql_file.text}"
        else:
            kind = "view" if persistent_view else "temp view" if view else "temp table" if temp else "table"
            statement = f"create or replace {kind} {target} as\n{sql_file.text}"
        self._execute(sql_file, statement, params or {})
        if not view:
            self._statement_done()

    def apply(self, name: str, params: dict[str, Any] | None = None) -> None:
        """Run `sql/<name>.sql` as written: a statement that changes its `out` table in place
        (the MERGEs of an incremental update, sql/tables/incremental/)."""
        sql_file = load_sql(name).expanded(params or {})
        self._execute(sql_file, sql_file.text, params or {})

    def query(self, name: str, params: dict[str, Any] | None = None):
        """Run `sql/<name>.sql` and return a DuckDB relation (.to_arrow_table(), .fetchall(), ...).

        The relation runs when fetched: fetch it once.
        """
        sql_file = load_sql(name).expanded(params or {})
        return self._execute(sql_file, sql_file.text, params or {}, lazy=True)

    @contextmanager
    def scanning(self, **tables: Any):
        """Inside the block, the statements of sql/ files (materialize, apply) read these Arrow
        tables under their names, as DuckDB's replacement scans do a Python variable's: for data
        that must go when its last statement is done. A registered table (register) is a catalog
        entry, which DuckDB keeps, with the data, until the transaction ends: twelve lengths' train
        keys registered in turn held 650 MB at once on all 25,676 train rows."""
        previous, self._scans = self._scans, tables
        try:
            yield
        finally:
            self._scans = previous

    def _execute_scanning(self, statement: str, bound: dict | list | None, tables: dict[str, Any]) -> list:
        """con.execute(statement) with `tables` as the local variables of the Python frame that
        calls it, where DuckDB's replacement scan looks names up (the frame's locals, then its
        globals: python_scan_all_frames is off)."""
        if not tables:
            return self.con.execute(statement, bound).fetchall()
        return eval(_EXECUTE, {}, {**tables, "_con": self.con, "_statement": statement, "_bound": bound})

    def fits_beside_duckdb(self, nbytes: int) -> bool:
        """Do `nbytes` of arrays held outside DuckDB fit in half of what the run's memory budget
        leaves beside DuckDB's share (DUCKDB_SHARE)? Always, without a budget."""
        room = self.room_beside_duckdb()
        return room is None or nbytes <= room

    def duckdb_limit_bytes(self) -> int | None:
        """DuckDB's share of the run's memory budget, in bytes: None without a budget."""
        return None if self.memory_limit is None else size_bytes(duckdb_memory_limit(self.memory_limit))

    def room_beside_duckdb(self) -> int | None:
        """The bytes fits_beside_duckdb allows: None without a budget."""
        return None if self.memory_limit is None else int(size_bytes(self.memory_limit) * (1 - DUCKDB_SHARE) / 2)

    def register(self, name: str, data: Any) -> None:
        """Expose an Arrow table (made in Python) to SQL under a fixed name."""
        self.con.register(quote_identifier(name).strip('"'), data)

    def store_spilled(self, table: str, parts: Iterable[pyarrow.Table]) -> None:
        """A build intermediate larger than the memory budget, made in Python a part at a time
        (Arrow tables of one schema, at least one; two are held at once): written to a Parquet
        file in the warehouse's tmp/ (a reader's: in a directory of its own) and read as `table`,
        a temp view of it, until drop(table) (or close) deletes it.

        Why not a temp table: DuckDB keeps a temp table in its buffer pool, so one past the limit
        is written out to tmp/ when a statement needs the memory, and read back and written out
        again by each statement that scans it. The train keys of 200,000 synthetic traces (48.9M
        positions) are scanned 20 times; one length's n-gram table took 16.0 s from the temp
        table, 8.6 s from the file."""
        if self.read_only:  # not in the writer's tmp/, which the next writer sweeps
            self._reader_spill = self._reader_spill or tempfile.TemporaryDirectory(prefix="specdraft-spill-")
            path = Path(self._reader_spill.name) / f"{table}{SPILL_SUFFIX}"
        else:
            path = self.root / "tmp" / f"{table}{SPILL_SUFFIX}"
            path.parent.mkdir(exist_ok=True)
        self._spilled[table] = path
        # each part is written in a thread while the next is made (pyarrow's encoding and numpy
        # both let go of the GIL): two parts are alive at once, the one written and the one made
        writer, written = None, None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill") as writing:
            try:
                for part in parts:
                    if writer is None:
                        # no dictionaries: pyarrow tries one per column chunk before it gives up on
                        # the keys, which never repeat enough (the 200,000 traces' keys: 38 s against 54 s)
                        writer = pyarrow.parquet.ParquetWriter(path, part.schema, use_dictionary=False)
                    if written is not None:
                        written.result()
                    written = writing.submit(writer.write_table, part, row_group_size=SPILL_ROW_GROUP)
                    del part  # the thread's, until written
                if written is not None:
                    written.result()
            finally:
                if writer is not None:
                    if written is not None:
                        written.exception()  # wait: the file is closed after its last write
                    writer.close()
        if writer is None:
            raise SpecdraftError(f"store_spilled({table!r}): no parts to write")
        literal = str(path).replace("'", "''")
        self.con.execute(f"create or replace temp view {quote_identifier(table)} as select * from read_parquet('{literal}')")

    def store(self, table: str, data: Any, append: bool = False, compression: dict[str, str] | None = None) -> None:
        """Write an Arrow table made in Python (backoff walk, prompt autocomplete, eval positions)
        as a table, or append its rows. compression: how a new table stores some of its columns
        (DuckDB's names: "uncompressed", "rle", ...), where its search for the best one would cost
        more time than the room it saves (random hashes); the others it chooses as usual. Rows
        appended with a column the table lacks (one added since its first rows: eval positions)
        add it, null in the rows before."""
        target = quote_identifier(table)
        # scanned, not registered: a registered table stays in memory until the transaction ends
        if append and self.has_table(table):
            self._add_missing_columns(table, data)
            statement = f"insert into {target} by name select * from _specdraft_arrow"
        elif compression:
            columns = self._execute_scanning("describe select * from _specdraft_arrow", None,
                                             {"_specdraft_arrow": data.slice(0, 0)})
            self._create_with(target, columns, compression)
            statement = f"insert into {target} by name select * from _specdraft_arrow"
        else:
            statement = f"create or replace table {target} as select * from _specdraft_arrow"
        self._execute_scanning(statement, None, {"_specdraft_arrow": data})
        self._statement_done()

    def column_names(self, table: str) -> set[str]:
        """The columns of `table` in the current schema (none if there is no such table)."""
        return {row[0] for row in self.con.execute(
            "select column_name from information_schema.columns where table_name = ? and table_schema = current_schema()",
            [table]).fetchall()}

    def _add_missing_columns(self, table: str, data: Any) -> None:
        """Add to `table` (in the current schema) the columns of the Arrow table `data` it lacks."""
        have = self.column_names(table)
        columns = self._execute_scanning("describe select * from _specdraft_arrow", None,
                                         {"_specdraft_arrow": data.slice(0, 0)})
        for name, column_type, *_ in columns:
            if name not in have:
                self.con.execute(f"alter table {quote_identifier(table)} add column {quote_identifier(name)} {column_type}")

    def _create_with(self, target: str, columns: list[tuple], compression: dict[str, str], temp: bool = False) -> None:
        """An empty table `target` (replacing one of that name) with `columns` (DESCRIBE's rows:
        name, type, ...), each named in `compression` stored with that compression."""
        unknown = set(compression) - {name for name, *_ in columns}
        if unknown:
            raise SpecdraftError(f"{target}: no column {', '.join(sorted(unknown))} to set a compression for")
        self.con.execute(f"create or replace {'temp table' if temp else 'table'} {target} (" + ", ".join(
            f"{quote_identifier(name)} {kind}"
            + (f" using compression {compression[name]}" if name in compression else "")
            for name, kind, *_ in columns) + ")")

    def load_parquet(self, table: str, files: str) -> None:
        """Replace `table` with the rows of Parquet files (a path or glob) written by another
        engine (the Spark build)."""
        self.con.execute(
            f"create or replace table {quote_identifier(table)} as select * from read_parquet(?)", [files]
        )

    def drop_view(self, view: str) -> None:
        self.con.execute(f"drop view if exists {quote_identifier(view)}")

    def drop(self, *tables: str) -> None:
        for table in tables:
            if table in self._spilled:
                self.drop_view(table)
                self._spilled.pop(table).unlink(missing_ok=True)
            else:
                self.con.execute(f"drop table if exists {quote_identifier(table)}")

    @contextmanager
    def transaction(self, name: str):
        """All-or-nothing: tables a stage creates appear together, or not at all if it fails or
        is killed (DuckDB rolls back an uncommitted transaction).

        `name` names the failpoints `transaction:<name>:before_commit` (every table of the stage
        written, none committed) and `transaction:<name>:after_commit`, where
        tests/test_reliability.py kills the run.
        """
        self.con.execute("begin transaction")
        try:
            yield
            reach(f"transaction:{name}:before_commit")
        except BaseException:
            self.con.execute("rollback")
            raise
        self.con.execute("commit")
        self.publish_snapshot()
        reach(f"transaction:{name}:after_commit")

    def built_with(self, stage: str) -> str | None:
        """The build key a stage's tables were last built with (None if never)."""
        if not self.has_table("build_state"):
            return None
        rows = self.query("warehouse/build_key", {"stage": stage}).fetchall()
        return rows[0][0] if rows else None

    def mark_built(self, stage: str, key: str | None) -> None:
        self.materialize("warehouse/build_state", {"stage": stage, "build_key": key},
                         append=self.has_table("build_state"))

    def has_table(self, table: str, schema: str | None = None) -> bool:
        """Is there such a table (or view) in `schema` (default: the current schema)?"""
        return self.table_kind(table, schema) is not None

    def table_kind(self, table: str, schema: str | None = None) -> str | None:
        """'BASE TABLE' or 'VIEW' for `table` in `schema` (default: the current schema); None if
        there is none."""
        rows = self.con.execute(
            "select table_type from information_schema.tables where table_name = ? "
            "and table_schema = coalesce(?, current_schema())",
            [table, schema],
        ).fetchall()
        return rows[0][0] if rows else None

    def row_count(self, table: str) -> int:
        return self.con.execute(f"select count(*) from {quote_identifier(table)}").fetchall()[0][0]
