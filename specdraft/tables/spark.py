"""Stage 4 on Apache Spark: the same n-gram tables, built from the same sql/ files, for corpora
past one machine.

`build_ngram_tables` (ngrams.py) drives the build through four calls: materialize, query, drop
and drop_view. `SparkTables` implements them on a SparkSession:

- each sql/ file is parsed as DuckDB SQL and written out as Spark SQL by SQLGlot, with the
  parameters bound as literals and four rewrites SQLGlot lacks (see `to_spark_sql`);
- build intermediates (position_keys, hash_powers, ...) are checkpointed DataFrames behind
  temp views;
- the tables later stages read are written as Parquet under `<warehouse>/spark/<dataset>/`,
  which `load_into_warehouse` copies into the dataset's DuckDB schema in one transaction.

Context keys are plain BIGINT arithmetic (two 31-bit primes, see hashing.py), which Spark and
DuckDB evaluate identically, so both engines give the same tables row for row.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from pathlib import Path
from typing import Any

from specdraft.errors import SpecdraftError, first_line

NEEDS_EXTRA = "--engine spark needs the spark extra: pip install 'specdraft[spark]'"
try:
    import sqlglot
    from sqlglot import exp
except ImportError as exc:  # the spark extra's; the core install has neither
    raise SpecdraftError(NEEDS_EXTRA) from exc
from specdraft.warehouse.connection import Warehouse, size_bytes
from specdraft.warehouse.sql_files import load_sql

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("spark_log4j2.properties")


def _literal(value: Any) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        return exp.Literal.number(value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, list | tuple):
        return exp.Array(expressions=[_literal(v) for v in value])
    if value is None:
        return exp.Null()
    raise SpecdraftError(f"cannot bind {value!r} ({type(value).__name__}) in Spark SQL")


def _bind(node: exp.Expression, params: dict[str, Any]) -> exp.Expression:
    if isinstance(node, exp.Placeholder):
        if node.name not in params:
            raise SpecdraftError(f"missing parameter ${node.name}")
        return _literal(params[node.name])
    return node


def _slice(node: exp.Expression) -> exp.Expression:
    """DuckDB's list[a:b] (1-based, inclusive) is Spark's slice(list, a, b - a + 1)."""
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Slice):
        start, end = node.expressions[0].this, node.expressions[0].expression
        length = exp.paren(exp.Sub(this=end.copy(), expression=start.copy()), copy=False) + 1
        return exp.Anonymous(this="slice", expressions=[node.this, start, length])
    return node


def _zip_unnests(node: exp.Expression) -> exp.Expression:
    """DuckDB unnests several lists of one select side by side; Spark allows one generator per
    select, so `unnest(a) as x, unnest(b) as y` becomes `inline(arrays_zip(a, b)) as (x, y)`."""
    if not isinstance(node, exp.Select):
        return node
    unnests = [e for e in node.expressions if isinstance(e, exp.Alias) and isinstance(e.this, exp.Explode)]
    if len(unnests) < 2:
        return node
    zipped = exp.Anonymous(this="arrays_zip", expressions=[e.this.this.copy() for e in unnests])
    inline = exp.Aliases(this=exp.Anonymous(this="inline", expressions=[zipped]),
                         expressions=[exp.to_identifier(e.alias) for e in unnests])
    first = node.expressions.index(unnests[0])
    kept = [e for e in node.expressions if e not in unnests]
    node.set("expressions", kept[:first] + [inline] + kept[first:])
    return node


def _inline_windows(node: exp.Expression) -> exp.Expression:
    """Spark cannot add a frame to a named window (`over (w rows ...)`): copy the WINDOW clause's
    partition and order into each such window."""
    if not isinstance(node, exp.Select) or not node.args.get("windows"):
        return node
    named = {w.this.name: w for w in node.args["windows"]}
    for window in node.find_all(exp.Window):
        alias = window.args.get("alias")
        if window.parent_select is node and alias is not None and alias.name in named:
            base = named[alias.name]
            window.set("alias", None)
            window.set("partition_by", [e.copy() for e in base.args.get("partition_by") or []])
            if base.args.get("order"):
                window.set("order", base.args["order"].copy())
    node.set("windows", None)
    return node


def _top_n_by(node: exp.Expression) -> exp.Expression:
    """DuckDB's `max_by(x, key, n)` (the n values of x with the largest keys, largest first) has
    no Spark form with n: the (key, x) structs are collected, sorted descending and cut to n."""
    if not isinstance(node, exp.ArgMax) or node.args.get("count") is None:
        return node
    value, key, n = (node.args[name].sql(dialect="spark") for name in ("this", "expression", "count"))
    return sqlglot.parse_one(f"transform(slice(sort_array(collect_list(struct({key} as k, {value} as v)), false), "
                             f"1, {n}), e -> e.v)", read="spark")


def to_spark_sql(duckdb_sql: str, params: dict[str, Any] | None = None) -> str:
    """One sql/ statement, written by DuckDB's rules, as Spark SQL with `params` bound."""
    tree = sqlglot.parse_one(duckdb_sql, read="duckdb")
    tree = tree.transform(lambda node: _bind(node, params or {}))
    tree = tree.transform(_slice).transform(_zip_unnests).transform(_inline_windows).transform(_top_n_by)
    return tree.sql(dialect="spark", comments=False)


def spark_memory(memory_limit: str | None) -> str:
    """The driver's JVM heap: the run's --memory-limit (in local mode the driver does all the work).

    >>> spark_memory("5GB"), spark_memory(None)
    ('4768m', '4g')
    """
    return f"{size_bytes(memory_limit) // 1024**2}m" if memory_limit else "4g"


def start_spark(master: str | None = None, memory: str = "4g", local_dir: Path | None = None):
    """A SparkSession for table builds (created once per process; settings apply at first start)."""
    master = master or DEFAULT_MASTER
    # pyspark warns about the pandas version on import; this build never uses pandas
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SpecdraftError(NEEDS_EXTRA) from exc
    builder = (
        SparkSession.builder.master(master)
        .appName("specdraft")
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", "16")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{LOG_CONFIG}")
    )
    if local_dir is not None:
        local_dir.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.local.dir", str(local_dir))
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Java missing, or the master unreachable
        raise SpecdraftError(f"cannot start Spark at {master}: {first_line(exc)}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkTables:
    """The stage-4 build's engine on Spark (a tables.ngrams.TableBuilder): kept tables go to
    Parquet under `out_dir`, intermediates stay in Spark (checkpointed)."""

    def __init__(self, spark, out_dir: Path) -> None:
        self.spark = spark
        self.out_dir = Path(out_dir)
        self.kept: list[str] = []
        self._intermediates: dict[str, Any] = {}

    def _sql(self, name: str, params: dict[str, Any] | None):
        sql_file = load_sql(name).expanded(params or {})
        try:
            return sql_file, self.spark.sql(to_spark_sql(sql_file.text, params))
        except SpecdraftError as exc:
            raise SpecdraftError(f"{sql_file.path.name}: {exc}") from exc

    def materialize(self, name: str, params: dict[str, Any] | None = None, *, append: bool = False,
                    temp: bool = False, view: bool = False, into: str | None = None) -> None:
        sql_file, frame = self._sql(name, params)
        out = into or sql_file.out
        if view:
            frame.createOrReplaceTempView(out)
        elif temp or (append and out in self._intermediates):
            if append:  # a union keeps both sides' partitions: coalesce, or they double every step
                frame = self._intermediates[out].unionByName(frame).coalesce(
                    self.spark.sparkContext.defaultParallelism)
            # computed now, before the view it reads is replaced, and cut from its lineage: the
            # hash powers' doubling would otherwise nest each step's whole plan in the next
            frame = frame.localCheckpoint(eager=True)
            self._intermediates[out] = frame
            frame.createOrReplaceTempView(out)
        else:
            path = self.out_dir / out
            frame.write.mode("append" if append else "overwrite").parquet(str(path))
            if out not in self.kept:
                self.kept.append(out)
            self.spark.read.parquet(str(path)).createOrReplaceTempView(out)

    def query(self, name: str, params: dict[str, Any] | None = None):
        return _Rows(self._sql(name, params)[1])

    def drop_view(self, view: str) -> None:
        self.spark.catalog.dropTempView(view)

    def drop(self, *tables: str) -> None:
        for table in tables:
            self._intermediates.pop(table, None)  # Spark's context cleaner frees its blocks
            self.spark.catalog.dropTempView(table)


class _Rows:
    def __init__(self, frame) -> None:
        self.frame = frame

    def fetchall(self) -> list[tuple]:
        return [tuple(row) for row in self.frame.collect()]


def build_on_spark(cfg, traces_path: Path, out_dir: Path, master: str | None = None,
                   memory_limit: str | None = None) -> list[str]:
    """Run build_ngram_tables on Spark; return the tables written under out_dir (as Parquet)."""
    from specdraft.tables.ngrams import build_ngram_tables

    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    spark = start_spark(master, spark_memory(memory_limit), out_dir.parent / "tmp")
    tables = SparkTables(spark, out_dir)
    try:
        build_ngram_tables(tables, cfg, Path(traces_path).resolve())
    except Exception as exc:
        if isinstance(exc, SpecdraftError):
            raise
        raise SpecdraftError(f"Spark build failed: {first_line(exc)}") from exc
    finally:
        from py4j.protocol import Py4JError

        # a JVM that died: its error, not this call's ConnectionRefusedError, is the news
        with contextlib.suppress(OSError, Py4JError):
            spark.catalog.clearCache()
    return tables.kept


def load_into_warehouse(wh: Warehouse, out_dir: Path, tables: list[str]) -> None:
    """Copy the Spark-built Parquet tables into the dataset's schema (call inside a transaction)."""
    for table in tables:
        wh.load_parquet(table, str(Path(out_dir) / table / "*.parquet"))
