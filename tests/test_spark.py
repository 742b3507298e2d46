"""The Spark engine: sql/ files transpiled by SQLGlot, run by PySpark in local mode, give the same
stage-4 tables as DuckDB, and the same results end to end.

Needs Java 17+ (.ci/run installs Debian's openjdk-17-jre-headless when `java` is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pytest

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.pipeline import run_all
from specdraft.tables.spark import to_spark_sql

# The parity fixture's flags (tests/fixtures/README.md): both index caps bind.
PARITY = {"max_completion_tokens": 160, "max_index_positions": 5000, "backoff_max_index_positions": 6000}


def test_parameters_are_bound_as_literals():
    sql = to_spark_sql("select $n + 1 as a, $name as b, $xs as c, $flag as d",
                       {"n": 41, "name": "it's", "xs": [1, 2], "flag": True})
    assert sql == "SELECT 41 + 1 AS a, 'it\\'s' AS b, ARRAY(1, 2) AS c, TRUE AS d"  # Spark escapes with \\
    with pytest.raises(SpecdraftError, match=r"missing parameter \$n"):
        to_spark_sql("select $n", {})


def test_duckdb_only_forms_are_rewritten():
    # list slices are 1-based and inclusive in DuckDB; Spark's slice takes (start, length)
    assert "SLICE(xs, 1, (5 - 1) + 1)" in to_spark_sql("select xs[1:$k] from t", {"k": 5})
    # side-by-side unnests become one generator
    zipped = to_spark_sql("select id, unnest(a) as x, unnest(b) as y from t")
    assert zipped == "SELECT id, INLINE(ARRAYS_ZIP(a, b)) AS (x, y) FROM t"
    # a frame on a named window is spelled out
    inlined = to_spark_sql("select sum(v) over (w rows between 1 preceding and current row) from t "
                           "window w as (partition by g order by o)")
    assert "WINDOW" not in inlined
    assert "PARTITION BY g ORDER BY o" in inlined and "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW" in inlined.upper()
    # the top n by a key: Spark's max_by takes no n
    top = to_spark_sql("select g, max_by(x, k, $n) as xs from t group by g", {"n": 3})
    assert top == ("SELECT g, TRANSFORM(SLICE(SORT_ARRAY(COLLECT_LIST(STRUCT(k AS k, x AS v)), FALSE), 1, 3), "
                   "e -> e.v) AS xs FROM t GROUP BY g")


STAGE4 = ("selected_traces", "query_context_keys", "exact_continuation_counts", "exact_continuations",
          "backoff_next_tokens", "backoff_top_tokens")


@pytest.fixture(scope="module")
def engines(tmp_path_factory, fixtures_dir):
    """The parity fixture run end to end twice: tables built by Spark (local mode), and by DuckDB."""
    root = tmp_path_factory.mktemp("engines")
    cfg = RunConfig(preset="seed", keep_counts=True, **PARITY)  # every stage-4 table, the full counts too
    data = str(fixtures_dir / "parity_traces.parquet")
    spark = run_all(cfg, root / "spark_wh", data, "unused", name="fx", engine="spark", spark_master="local[2]")
    duck = run_all(cfg, root / "duck_wh", data, "unused", name="fx")
    con = duckdb.connect()
    con.execute(f"attach '{root / 'spark_wh' / 'specdraft.duckdb'}' as s (read_only)")
    con.execute(f"attach '{root / 'duck_wh' / 'specdraft.duckdb'}' as d (read_only)")
    yield {"spark": spark, "duck": duck, "con": con, "parquet": root / "spark_wh" / "spark" / "fx",
           "warehouses": {"spark": root / "spark_wh", "duck": root / "duck_wh"}}
    con.close()


@pytest.mark.parametrize("table", STAGE4)
def test_spark_table_equals_duckdb_table(engines, table):
    con = engines["con"]
    duck = f"d.fx.{table}"
    count = con.sql(f"select count(*) from {duck}").fetchall()[0][0]
    assert count > 0
    # the Parquet Spark wrote, and the table loaded from it into the warehouse
    for spark in (f"read_parquet('{engines['parquet'] / table}/*.parquet')", f"s.fx.{table}"):
        spark_rel, duck_rel = con.sql(f"select * from {spark}"), con.sql(f"select * from {duck}")
        assert spark_rel.columns == duck_rel.columns
        assert spark_rel.types == duck_rel.types
        assert con.sql(f"select count(*) from {spark}").fetchall()[0][0] == count
        for left, right in ((duck, spark), (spark, duck)):
            extra = con.sql(f"select count(*) from (select * from {left} except all select * from {right})")
            assert extra.fetchall()[0][0] == 0, f"{table}: rows of {left} missing from {right}"


def _histogram(summary: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in summary["histogram"].items()}


def test_spark_engine_end_to_end_matches_duckdb_and_the_reference(engines, fixtures_dir):
    reference = json.loads((fixtures_dir / "parity_reference.json").read_text())
    for key in ("selected", "oracle_best", "decode_step"):
        assert engines["spark"][key]["histogram"] == engines["duck"][key]["histogram"]
    assert _histogram(engines["spark"]["selected"]) == _histogram(reference["every_position"])
    for key in ("exact_positions_added", "backoff_positions_added"):
        assert engines["spark"][key] == engines["duck"][key] == reference[key]


def test_bad_master_fails_with_one_line(tmp_path, fixtures_dir):
    done = subprocess.run(
        [sys.executable, "-m", "specdraft.cli", "build", "--data", str(fixtures_dir / "parity_traces.parquet"),
         "--warehouse", str(tmp_path / "wh"), "--engine", "spark", "--spark-master", "nonsense://x"],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("specdraft: error: cannot start Spark at nonsense://x")


def test_hash_powers_double_past_long_traces(engines):
    """The doubling reads each step's table back (hash_powers.sql): a 20,000-token trace needs 15
    steps, which once overflowed Spark's optimizer when each step's plan nested the last."""
    from specdraft.tables.hashing import B1, B2, P1, P2
    from specdraft.tables.ngrams import build_hash_powers
    from specdraft.tables.spark import SparkTables, start_spark

    spark = start_spark("local[2]")  # the session the engines fixture started
    spark.sql("select 0 as trace_id, 'train' as split, 0 as split_row, 1 as prompt_len, "
              "20000 as n_tokens").createOrReplaceTempView("selected_traces")
    tables = SparkTables(spark, engines["parquet"].parent / "powers")
    build_hash_powers(tables)
    rows = spark.sql("select pos, b1, b2 from hash_powers where pos in (0, 1, 12345, 19999)").collect()
    assert {r.pos: (r.b1, r.b2) for r in rows} == {
        pos: (pow(B1, pos, P1), pow(B2, pos, P2)) for pos in (0, 1, 12345, 19999)}
    assert spark.sql("select count(*) as n from hash_powers").collect()[0].n >= 20000


def test_tables_are_reused_whichever_engine_built_them(engines, fixtures_dir, tmp_path):
    """A copy of each engine's warehouse, run again with the other engine: the build key does not
    name the engine, so no stage is rebuilt (build_state unchanged) and the tables stay as built."""
    import shutil

    from .test_parity import build_state, table_checksums

    cfg = RunConfig(preset="seed", keep_counts=True, **PARITY)  # as the engines fixture built them
    for built_by, rerun_with in (("spark", "duckdb"), ("duck", "spark")):
        root = tmp_path / built_by
        shutil.copytree(engines["warehouses"][built_by], root)
        state, tables = build_state(root, "fx"), table_checksums(root, "fx")
        assert state and tables
        again = run_all(cfg, root, str(fixtures_dir / "parity_traces.parquet"), "unused", name="fx",
                        engine=rerun_with, spark_master="local[2]")
        assert build_state(root, "fx") == state, f"built by {built_by}, rerun with {rerun_with}"
        assert table_checksums(root, "fx") == tables
        assert again["selected"] == engines[built_by]["selected"]


def test_a_jvm_that_died_mid_build_is_the_one_line_error(tmp_path, monkeypatch):
    """A JVM killed mid-build (out of memory, say) made the cleanup's clearCache raise
    ConnectionRefusedError, which replaced "Spark build failed: ..." with a 70-line traceback (a
    helper's review); the build's own error is what the run reports."""
    import logging

    from click.testing import CliRunner

    from specdraft.cli import main
    from specdraft.tables import ngrams, spark

    class DeadJvm:
        class catalog:
            @staticmethod
            def clearCache():
                raise ConnectionRefusedError(111, "Connection refused")

    def build_that_loses_its_jvm(*args):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(spark, "start_spark", lambda *args: DeadJvm())
    monkeypatch.setattr(ngrams, "build_ngram_tables", build_that_loses_its_jvm)
    with pytest.raises(SpecdraftError, match=r"Spark build failed: \[Errno 111\] Connection refused"):
        spark.build_on_spark(RunConfig(), tmp_path / "traces.parquet", tmp_path / "spark" / "out")
    # and py4j's own tracebacks of the calls that failed stay out of the CLI's output
    CliRunner().invoke(main, ["sql", "--warehouse", str(tmp_path / "none"), "select 1"])
    assert logging.getLogger("py4j").getEffectiveLevel() == logging.CRITICAL
