"""The README's example queries, run against a warehouse holding two datasets with two tokenizers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specdraft.config import RunConfig
from specdraft.pipeline import run_all
from specdraft.warehouse.analysis import run_query

from .conftest import FIXTURES
from .test_tokenizer import _write_local_hf_tokenizer

README = Path(__file__).resolve().parents[1] / "README.md"
FLAGS = {"max_completion_tokens": 160, "max_index_positions": 5000, "backoff_max_index_positions": 6000}


def readme_queries() -> list[str]:
    text = README.read_text()
    block = text.split("<!-- queries -->", 1)[1].split("<!-- end queries -->", 1)[0]
    return re.findall(r"```sql\n(.*?)```", block, flags=re.DOTALL)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("warehouse")
    tokenizer = tmp_path_factory.mktemp("tok") / "tiny"
    _write_local_hf_tokenizer(tokenizer)
    data = str(FIXTURES / "parity_traces.parquet")
    run_all(RunConfig(**FLAGS), root, data, "unused", name="qwen_side")
    run_all(RunConfig(tokenizer=str(tokenizer), **FLAGS), root, data, "unused", name="tiny_side")
    return root


def query(warehouse, text, dataset=None):
    out: list[str] = []
    run_query(warehouse, text, fmt="json", dataset=dataset, echo=out.append)
    return json.loads(out[0])


def test_readme_has_8_to_10_queries():
    assert 8 <= len(readme_queries()) <= 10


@pytest.mark.parametrize("index", range(len(readme_queries())))
@pytest.mark.parametrize("dataset", ["qwen_side", "tiny_side"])
def test_readme_query_returns_rows(warehouse, index, dataset):
    rows = query(warehouse, readme_queries()[index], dataset=dataset)
    assert rows, readme_queries()[index]


DATASETS = ["qwen_side", "tiny_side"]


def _rows(warehouse, dataset, sql, params=()):
    """Rows of a query on one dataset's schema, as dicts (read-only, like any analyst's client)."""
    from specdraft.warehouse.connection import Warehouse

    with Warehouse(warehouse, read_only=True, dataset=dataset) as wh:
        relation = wh.run_text(sql, list(params))
        names = [d[0] for d in relation.description]
        return [dict(zip(names, row)) for row in relation.fetchall()]


def _run_results(warehouse, dataset) -> dict:
    (row,) = _rows(warehouse, dataset, "select results from main.runs where dataset = ?", [dataset])
    return json.loads(row["results"])


# The analysis views' meaning, each recomputed in Python from the table it reads, and tied back
# to the run's results.json (recorded in main.runs) and to the candidates it was chosen from.


@pytest.mark.parametrize("dataset", DATASETS)
def test_eval_positions_are_the_runs_choices(warehouse, dataset):
    """One row per eval response position; accepted is the chosen candidate's, oracle_accepted the
    best selectable candidate's there, and their histogram is results.json's `selected`."""
    from collections import Counter

    from specdraft.policy.confidence import SELECTABLE

    results = _run_results(warehouse, dataset)
    positions = _rows(warehouse, dataset, "select * from eval_positions order by trace_id, pos")
    lengths = _rows(warehouse, dataset, "select trace_id, prompt_len, n_tokens from selected_traces "
                                        "where split = 'eval'")
    expected = {(t["trace_id"], t["prompt_len"] + c) for t in lengths for c in range(t["n_tokens"] - t["prompt_len"])}
    assert {(p["trace_id"], p["pos"]) for p in positions} == expected
    assert len(positions) == len(expected) == results["selected"]["positions"]
    histogram = Counter(p["accepted"] for p in positions)
    assert {str(k): v for k, v in sorted(histogram.items())} == results["selected"]["histogram"]
    assert Counter(p["oracle_accepted"] for p in positions) == {
        int(k): v for k, v in results["oracle_best"]["histogram"].items()}
    drafts: dict[tuple, dict[str, int]] = {}
    lengths: dict[tuple, int] = {}
    for c in _rows(warehouse, dataset, "select trace_id, pos, family, source, accepted, len(draft) as length "
                                       "from candidates where split = 'eval'"):
        if c["family"] in SELECTABLE:
            drafts.setdefault((c["trace_id"], c["pos"]), {})[c["source"]] = c["accepted"]
            lengths[c["trace_id"], c["pos"], c["source"]] = c["length"]
    chain = tuple(results["policy"].get("chain", ()))
    by_position = {(p["trace_id"], p["pos"]): p for p in positions}
    chosen = chained = 0
    for p in positions:
        here = drafts.get((p["trace_id"], p["pos"]), {})
        assert p["oracle_accepted"] == max(here.values(), default=0)
        if p["source"] is None:
            assert not here and p["accepted"] == 0
            continue
        chosen += 1
        after = by_position.get((p["trace_id"], p["pos"] + 1))
        own = here[p["source"]]
        if p["source"].split(":")[0] not in chain or own == 0 or after is None or lengths[
                p["trace_id"], p["pos"], p["source"]] < 16:
            assert p["accepted"] == own
            continue
        # chosen again past its right first token (ConfidencePolicy.chain): that token, then the
        # next position's own choice, which here is the whole rest where that choice is whole
        next_own = drafts.get((p["trace_id"], p["pos"] + 1), {}).get(after["source"], 0)
        if after["source"] is not None and lengths[p["trace_id"], p["pos"] + 1, after["source"]] == 16:
            assert p["accepted"] == 1 + min(next_own, 15)
            chained += 1
        else:
            assert p["accepted"] >= 1
    assert chosen > len(positions) / 2
    assert chained > 0 or not chain


@pytest.mark.parametrize("dataset", DATASETS)
def test_policy_regret_is_oracle_minus_accepted(warehouse, dataset):
    positions = _rows(warehouse, dataset, "select * from eval_positions")
    regret = _rows(warehouse, dataset, "select * from policy_regret")
    expected = {(p["run_id"], p["trace_id"], p["pos"]): p["oracle_accepted"] - p["accepted"]
                for p in positions if p["oracle_accepted"] > p["accepted"]}
    assert expected  # the policy is not the oracle on this fixture: some positions lost tokens
    assert {(r["run_id"], r["trace_id"], r["pos"]): r["regret"] for r in regret} == expected
    by_key = {(p["run_id"], p["trace_id"], p["pos"]): p for p in positions}
    for r in regret:
        p = by_key[(r["run_id"], r["trace_id"], r["pos"])]
        assert (r["source"], r["accepted"], r["oracle_accepted"]) == (p["source"], p["accepted"], p["oracle_accepted"])


@pytest.mark.parametrize("dataset", DATASETS)
def test_acceptance_by_position_buckets_sum_to_the_run(warehouse, dataset):
    results = _run_results(warehouse, dataset)
    buckets = _rows(warehouse, dataset, "select * from acceptance_by_position where run_id = ? "
                                        "order by position_bucket", [results["run_id"]])
    positions = _rows(warehouse, dataset, "select completion_pos, accepted, oracle_accepted from eval_positions "
                                          "where run_id = ?", [results["run_id"]])
    assert len(buckets) > 1
    assert sum(b["positions"] for b in buckets) == results["selected"]["positions"]
    # positions-weighted bucket means give back the run's means
    total = results["selected"]["positions"]
    assert sum(b["avg_accepted"] * b["positions"] for b in buckets) / total == pytest.approx(
        results["selected"]["avg_accepted"])
    assert sum(b["avg_oracle_accepted"] * b["positions"] for b in buckets) / total == pytest.approx(
        results["oracle_best"]["avg_accepted"])
    # and each bucket is the 32 response positions from its start
    for b in buckets:
        inside = [p for p in positions if b["position_bucket"] <= p["completion_pos"] < b["position_bucket"] + 32]
        assert b["position_bucket"] % 32 == 0 and b["positions"] == len(inside)
        assert b["avg_accepted"] == pytest.approx(sum(p["accepted"] for p in inside) / len(inside))
        assert b["avg_oracle_accepted"] == pytest.approx(sum(p["oracle_accepted"] for p in inside) / len(inside))


@pytest.mark.parametrize("dataset", DATASETS)
def test_acceptance_by_source_counts_the_candidates(warehouse, dataset):
    from collections import defaultdict

    groups = defaultdict(list)
    for c in _rows(warehouse, dataset, "select split, family, source, ctx_len, accepted from candidates"):
        groups[(c["split"], c["family"], c["source"], c["ctx_len"])].append(c["accepted"])
    view = {(r["split"], r["family"], r["source"], r["ctx_len"]): r
            for r in _rows(warehouse, dataset, "select * from acceptance_by_source")}
    assert set(view) == set(groups) and {key[0] for key in view} == {"calibration", "eval"}
    for key, accepted in groups.items():
        row = view[key]
        assert row["drafts"] == len(accepted), key
        assert row["hit_rate"] == pytest.approx(sum(a > 0 for a in accepted) / len(accepted)), key
        assert row["avg_accepted"] == pytest.approx(sum(accepted) / len(accepted)), key


def test_two_tokenizers_side_by_side(warehouse):
    datasets = query(warehouse, "select name, tokenizer, tokenizer_fingerprint from main.datasets order by name")
    assert [d["name"] for d in datasets] == ["qwen_side", "tiny_side"]
    assert datasets[0]["tokenizer_fingerprint"] != datasets[1]["tokenizer_fingerprint"]
    runs = query(warehouse, "select dataset, tokenizer, selected_avg_accepted from main.runs order by dataset")
    assert [r["dataset"] for r in runs] == ["qwen_side", "tiny_side"]
    # each dataset's text renders through its own vocabulary
    texts = query(warehouse, "select qwen_side.as_text([9707, 11, 1879]) as a, tiny_side.as_text([]) as b")
    assert texts == [{"a": "Hello, world", "b": ""}]


def test_as_text_decodes_characters_split_over_tokens(warehouse):
    """as_text joined each token's decoded piece, so an emoji or a CJK character spread over two or
    three byte tokens showed as U+FFFDs (in the report's context tables and the compare page).
    The bytes are decoded together now; a list cut inside a character falls back to the pieces."""
    from specdraft.sources.tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    text = "Count the beads 🧮: 鬱 is one character."
    ids = tokenizer.encode(text)
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)  # some token holds part of a character
    cut = next(i for i in range(1, len(ids)) if "\ufffd" in tokenizer.decode(ids[:i]))
    (row,) = query(warehouse, f"select qwen_side.as_text({ids}) as whole, qwen_side.as_text({ids[:cut]}) as cut")
    assert row["whole"] == text
    assert row["cut"].startswith("Count the beads") and row["cut"].endswith("\ufffd")


def test_sql_is_read_only_by_default(warehouse):
    from specdraft.errors import SpecdraftError

    with pytest.raises(SpecdraftError, match="read-only"):
        query(warehouse, "create table main.scratch as select 1 as x")


def test_read_only_handles_refuse_statements_that_write_files(warehouse, tmp_path):
    """DuckDB's read-only mode guards the database file only: a COPY ... TO over the traces Parquet
    ran from `specdraft.open` and `specdraft sql`, destroying the dataset's traces."""
    from click.testing import CliRunner

    import specdraft
    from specdraft.cli import main
    from specdraft.errors import SpecdraftError

    traces = sorted((warehouse / "traces").glob("*.parquet"))
    before = [path.read_bytes() for path in traces]
    copy = f"copy (select 1 as x) to '{traces[0]}' (format parquet)"
    # the last three got past the check (a helper's review): EXPLAIN ANALYZE runs the COPY it
    # explains, a prepared COPY runs at EXECUTE, and ATTACH opened the readers' snapshot writable
    statements = {copy: "COPY", f"export database '{tmp_path / 'exported'}'": "EXPORT",
                  f"/* mine */ explain analyze {copy}": "COPY", f"prepare p as {copy}; execute p": "PREPARE",
                  f"attach '{warehouse / 'specdraft.snapshot.duckdb'}' as snap (read_only false)": "ATTACH",
                  # a query log over the warehouse file itself made it unreadable (a later review)
                  f"set log_query_path = '{warehouse / 'specdraft.duckdb'}'; select 42 as x": "SET",
                  f"pragma enable_profiling = 'json'; set profiling_output = '{tmp_path / 'p.json'}'": "SET"}
    with specdraft.open(warehouse) as wh:
        for statement, kind in statements.items():
            with pytest.raises(SpecdraftError, match=f"{kind} writes files or databases.*open read-only"):
                wh.sql(statement)
    for statement, kind in statements.items():
        result = CliRunner().invoke(main, ["sql", statement, "--warehouse", str(warehouse)])
        assert result.exit_code == 1 and f"{kind} writes files" in result.stderr, result.stderr
    assert [path.read_bytes() for path in traces] == before and not (tmp_path / "exported").exists()
    with specdraft.open(warehouse) as wh:  # what explains without running still runs
        assert wh.sql("explain select 1 as x").height == 1 and wh.sql("explain analyze select 1 as x").height == 1


def test_sql_write_is_all_or_nothing(warehouse, tmp_path):
    """`specdraft sql --write` with several statements: one that failed left the ones before it
    done (a helper's review: `delete from main.runs; select error('boom')` emptied the runs)."""
    import shutil

    from click.testing import CliRunner

    from specdraft.cli import main

    copy = tmp_path / "warehouse"
    shutil.copytree(warehouse, copy)

    def sql(*args):
        return CliRunner().invoke(main, ["sql", "--warehouse", str(copy), "--format", "csv", *args])

    runs = sql("select count(*) as n from main.runs").stdout
    failed = sql("--write", "delete from main.runs; create table mine as select 1 as x; select error('boom')")
    assert failed.exit_code == 1 and "boom" in failed.stderr
    assert sql("select count(*) as n from main.runs").stdout == runs != "n\n0\n"
    assert "mine" in sql("select * from mine").stderr  # (no such table)
    done = sql("--write", "create table mine as select 1 as x; insert into mine values (2); select * from mine")
    assert done.exit_code == 0 and done.stdout == "x\n1\n2\n"
    own = sql("--write", "begin; insert into mine values (3); commit")  # its own transaction, as given
    assert own.exit_code == 0 and sql("select count(*) as n from mine").stdout == "n\n3\n"
    # a CHECKPOINT cannot run in a transaction that changed something: such text runs as given
    checkpointed = sql("--write", "insert into mine values (4); checkpoint")
    assert checkpointed.exit_code == 0 and sql("select count(*) as n from mine").stdout == "n\n4\n"


def test_notebook_errors_are_specdraft_errors_whenever_they_arise(warehouse):
    """Parse and bind errors were SpecdraftErrors but those raised as the query runs (a failed
    cast, error()) were DuckDB's own, and a bare parameter failed inside DuckDB's binding."""
    import specdraft
    from specdraft.errors import SpecdraftError

    with specdraft.open(warehouse) as wh:
        for fetch in (wh.sql, wh.arrow):
            with pytest.raises(SpecdraftError, match="query failed: Conversion Error"):
                fetch("select 'a'::int as x")
            with pytest.raises(SpecdraftError, match="query failed: Invalid Input Error: boom"):
                fetch("select error('boom') as x")
        with pytest.raises(SpecdraftError, match="must be a list, tuple or dict, not int"):
            wh.sql("select ? as x", 5)
        assert wh.sql("select ? as x", (5,))["x"].to_list() == [5]


def test_lookup_shows_every_table_source(warehouse):
    from specdraft.drafters.lookup import lookup

    rows = lookup(warehouse, "qwen_side", "<think>\nHmm, okay. Let me think about", RunConfig())
    sources = {row["source"].split(":")[0] for row in rows}
    assert {"ngram", "backoff"} <= sources and all(row["text"] for row in rows)
    rows = lookup(warehouse, "qwen_side", "The total is 12. The total is", RunConfig())
    copy = next(row for row in rows if row["source"].startswith("recent-copy"))
    assert copy["text"].startswith(" 12. The total is")  # the repeat continues


def test_lookup_ranks_its_texts_contexts_on_a_queried_build(warehouse, tmp_path):
    """The fixture's warehouse ranks only what calibration and eval look up; lookup ranks the
    contexts of its text itself, so it shows what a build of every context shows."""
    from specdraft.drafters.lookup import lookup

    everything = tmp_path / "all"
    run_all(RunConfig(ngram_contexts="all", **FLAGS), everything, str(FIXTURES / "parity_traces.parquet"), "unused",
            name="qwen_side")
    # and with an index cap that cuts the train positions short: the lookup ranks as its build did
    capped = {**FLAGS, "max_index_positions": 300, "max_continuations_per_context": 2}
    capped_queried, capped_all = tmp_path / "capped", tmp_path / "capped_all"
    for root, contexts in ((capped_queried, "queried"), (capped_all, "all")):
        run_all(RunConfig(ngram_contexts=contexts, **capped), root, str(FIXTURES / "parity_traces.parquet"),
                "unused", name="qwen_side")
    train = query(warehouse, "select as_text(tokens[1:60]) as text from selected_traces where split = 'train' "
                             "order by trace_id limit 1", dataset="qwen_side")
    texts = ["<think>\nHmm, okay. Let me think about", train[0]["text"]]
    for text in texts:
        queried = lookup(warehouse, "qwen_side", text, RunConfig())
        assert [r for r in queried if r["source"].startswith("ngram")], text
        assert queried == lookup(everything, "qwen_side", text, RunConfig()), text
        assert lookup(capped_queried, "qwen_side", text, RunConfig()) == lookup(capped_all, "qwen_side", text,
                                                                                RunConfig()), text


def test_lookup_marks_the_continuation_the_run_drafts(warehouse):
    """lookup showed each length's three most frequent continuations, with RunConfig's defaults:
    under --preset default, which drafts each context's most supported path, the run's n-gram draft
    was often none of them (a helper's review: 53 of 246). The row marked drafted at each length is
    the run's ngram-all draft there, for text that encodes back to the run's tokens."""
    from specdraft.drafters.lookup import lookup
    from specdraft.sources.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(RunConfig().tokenizer)
    drafts = _rows(warehouse, "qwen_side",
                   "select c.trace_id, c.pos, c.ctx_len, c.draft, t.tokens[1:c.pos] as known from candidates as c "
                   "join selected_traces as t using (trace_id) where c.family = 'ngram-all' "
                   "order by hash(c.trace_id, c.pos) limit 200")
    by_position: dict[tuple, list] = {}
    for row in drafts:
        by_position.setdefault((row["trace_id"], row["pos"]), []).append(row)
    checked = beyond_top = 0
    for rows in list(by_position.values())[:30]:
        tail = rows[0]["known"][-70:]  # past the longest context (64); the prompt's seam does not encode back
        text = tokenizer.decode(tail)
        if tokenizer.encode(text) != tail:
            continue
        shown = {row["ctx_len"]: row for row in lookup(warehouse, "qwen_side", text)
                 if row["source"].startswith("ngram:") and row["source"].endswith(", drafted)")}
        for row in rows:
            assert shown[row["ctx_len"]]["draft"] == row["draft"], (row["trace_id"], row["pos"], row["ctx_len"])
            checked += 1
            beyond_top += "(rank 1," not in shown[row["ctx_len"]]["source"]
    assert checked >= 20 and beyond_top >= 1, (checked, beyond_top)


def test_lookup_cli(warehouse):
    from click.testing import CliRunner

    from specdraft.cli import main

    result = CliRunner().invoke(main, ["lookup", "--warehouse", str(warehouse), "--dataset", "qwen_side",
                                       "--format", "json", "The answer is"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)
    # the table: each row's text starts in the same column (a source name longer than 22
    # characters, "ngram:6 (rank 1, drafted)", pushed its row's text out of line)
    result = CliRunner().invoke(main, ["lookup", "--warehouse", str(warehouse), "--dataset", "qwen_side", "The answer is"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(len(line.split("  ")[0]) > 22 for line in lines), lines  # the case that overran
    assert len({line.index(" '") if " '" in line else line.index(' "') for line in lines}) == 1, lines


CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)


def _chromium(*args: str) -> str:
    import subprocess

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    done = subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_html_report_has_its_charts(warehouse, tmp_path):
    from specdraft.report.html import write_html_report
    from specdraft.report.results import load_run

    results = load_run(warehouse, None)
    page = write_html_report(warehouse, results, tmp_path / "report.html")
    html = page.read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing fetched: works offline
    assert html.count('class="bar"') >= 3 * (results["draft_len"] + 1) + len(results["per_source"])
    assert "<table id=\"contexts\">" in html and html.count("<tr>") > 5
    # the longest contexts that hit: multi-token, longest first, whitespace made visible
    longest = html.split('<table id="longest-contexts">', 1)[1].split("</table>", 1)[0]
    lengths = [int(cell) for cell in re.findall(r"</code></td><td>(\d+)</td>", longest)]
    assert len(lengths) >= 5 and min(lengths) > 1 and lengths == sorted(lengths, reverse=True)
    assert "\n" not in "".join(re.findall(r"<code>(.*?)</code>", longest, flags=re.DOTALL))
    # acceptance by position: a y axis with its label and values from 0
    positions = html.split('<div id="positions">', 1)[1].split("</svg>", 1)[0]
    axis = positions.split('<g class="y-axis">', 1)[1].split("</g>", 1)[0]
    assert "accepted tokens per position" in axis and 'font-size="11">0</text>' in axis
    assert axis.count("<line") >= 3
    # draft length: one marker per fixed length and per verify cost's adaptive policy
    study = results["draft_length"]
    chart = html.split('<div id="draft-length">', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="marker"') == len(study["fixed"]) + len(study["adaptive"]) == results["draft_len"] + 5
    assert html.split('<table id="draft-length-speedup">', 1)[1].split("</table>")[0].count("<tr>") == 1 + 5
    assert all(f"<td>tree_b{budget}</td>" in html for budget in (16, 32, 64))


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_report_renders_in_headless_chromium(warehouse, tmp_path):
    """Open the page as a browser would: the rendered DOM has the charts, and a screenshot is taken."""
    from specdraft.report.html import write_html_report
    from specdraft.report.results import load_run

    page = write_html_report(warehouse, load_run(warehouse, None), tmp_path / "report.html")
    profile = str(tmp_path / "profile")
    dom = _chromium(f"--user-data-dir={profile}", "--dump-dom", page.as_uri())
    for chart in ('id="histogram"', 'id="sources"', 'id="positions"', 'id="contexts"'):
        assert chart in dom
    assert dom.count("<rect") > 40
    shot = tmp_path / "report.png"
    _chromium(f"--user-data-dir={profile}", "--window-size=1000,2000", f"--screenshot={shot}", page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_sql_command_formats(warehouse, tmp_path):
    import polars as pl
    from click.testing import CliRunner

    from specdraft.cli import main

    runner = CliRunner()
    base = ["sql", "--warehouse", str(warehouse), "--dataset", "qwen_side"]
    query = "select source, count(*) as n from candidates group by source order by source"
    csv = runner.invoke(main, [*base, "--format", "csv", query])
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0] == "source,n"
    table = runner.invoke(main, [*base, query])
    assert table.exit_code == 0 and "recent-copy:1" in table.stdout
    out = tmp_path / "q.parquet"
    parquet = runner.invoke(main, [*base, "--format", "parquet", "-o", str(out), query])
    assert parquet.exit_code == 0 and parquet.stdout == ""
    assert pl.read_parquet(out).columns == ["source", "n"]
    assert runner.invoke(main, [*base, "--format", "parquet", query]).exit_code == 1  # needs -o
    nothing = runner.invoke(main, [*base])
    assert nothing.exit_code == 2 and "give a QUERY or --file" in nothing.stderr and "not both" not in nothing.stderr
    # a query that opens with a SQL comment (as the README's do) is a query, not an option; a
    # word that only looks like an option still is one
    commented = runner.invoke(main, [*base, "--format", "csv", f"-- the sources\n{query}"])
    assert commented.exit_code == 0 and commented.stdout == csv.stdout
    typo = runner.invoke(main, [*base, "--fromat", "csv", query])
    assert typo.exit_code == 2 and "No such option: --fromat" in typo.stderr
    bad = runner.invoke(main, [*base, "select * from no_such_table"])
    assert bad.exit_code == 1 and bad.stderr.count("\n") == 1 and "no_such_table" in bad.stderr


def test_sql_shows_nested_and_interval_columns_as_text_where_the_format_cannot_hold_them(warehouse, tmp_path):
    """CSV cannot hold a list (a draft's tokens) and polars cannot take an interval: both failed
    with a polars traceback; they are DuckDB's text of the value there, and stay lists elsewhere."""
    import polars as pl
    from click.testing import CliRunner

    from specdraft.cli import main

    base = ["sql", "--warehouse", str(warehouse), "--dataset", "qwen_side"]
    query = ("select draft, interval 3 day as waited, 1 as \"odd\"\"name\" from candidates "
             "order by trace_id, pos, source limit 1")
    (first,) = _rows(warehouse, "qwen_side", "select draft from candidates order by trace_id, pos, source limit 1")
    draft = first["draft"]
    csv = CliRunner().invoke(main, [*base, "--format", "csv", query], catch_exceptions=False)
    assert csv.exit_code == 0, csv.stderr
    assert csv.stdout.splitlines() == ['draft,waited,"odd""name"', f'"{draft}",3 days,1']
    table = CliRunner().invoke(main, [*base, query], catch_exceptions=False)
    assert table.exit_code == 0 and "3 days" in table.stdout
    out = tmp_path / "q.parquet"
    assert CliRunner().invoke(main, [*base, "--format", "parquet", "-o", str(out), query]).exit_code == 0
    assert pl.read_parquet(out)["draft"].to_list() == [draft]  # a list where the format holds one


def test_bytes_and_intervals_are_text_where_the_output_cannot_hold_them(warehouse):
    """The vocab's token bytes (BLOB) failed CSV and JSON with a polars traceback (a Rust panic for
    JSON), and an interval failed specdraft.open's sql() (a helper's review): DuckDB's text of them."""
    import json

    import pyarrow as pa
    from click.testing import CliRunner

    import specdraft
    from specdraft.cli import main

    query = "select token_id, bytes, interval 2 day as waited from vocab where token_id in (0, 94) order by token_id"
    base = ["sql", "--warehouse", str(warehouse), "--dataset", "qwen_side", query]
    csv = CliRunner().invoke(main, [*base, "--format", "csv"], catch_exceptions=False)
    assert csv.exit_code == 0 and csv.stdout.splitlines() == ["token_id,bytes,waited", "0,!,2 days", "94,\\xA1,2 days"]
    as_json = CliRunner().invoke(main, [*base, "--format", "json"], catch_exceptions=False)
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)[1] == {"token_id": 94, "bytes": "\\xA1",
                                                                        "waited": "2 days"}
    with specdraft.open(warehouse, dataset="qwen_side") as wh:
        assert wh.sql(query)["waited"].to_list() == ["2 days", "2 days"]
        assert wh.arrow(query).column("waited").type.equals(pa.month_day_nano_interval())  # Arrow holds them


def test_open_gives_a_read_only_notebook_handle(warehouse):
    """specdraft.open: polars and Arrow results, the runs and datasets, the dataset's tables by
    plain name (the latest ingested by default, another with use()), and no writes."""
    import polars as pl
    import pyarrow as pa

    import specdraft
    from specdraft.errors import SpecdraftError

    with specdraft.open(warehouse) as wh:
        assert wh.dataset == "tiny_side"  # ingested last
        datasets = wh.datasets()
        assert isinstance(datasets, pl.DataFrame) and sorted(datasets["name"].to_list()) == ["qwen_side", "tiny_side"]
        runs = wh.runs()
        assert runs.height == 2 and set(runs["dataset"].to_list()) == {"qwen_side", "tiny_side"}
        assert runs["selected_avg_accepted"].min() > 0
        frame = wh.use("qwen_side").sql("select count(*) as n from eval_positions where run_id = $run",
                                         {"run": runs.filter(pl.col("dataset") == "qwen_side")["run_id"][0]})
        assert frame.columns == ["n"] and frame["n"][0] > 0
        table = wh.arrow("select source, count(*) as n from candidates group by source order by source")
        assert isinstance(table, pa.Table) and "recent-copy:1" in table.column("source").to_pylist()
        with pytest.raises(SpecdraftError, match="read-only"):
            wh.sql("create table scratch as select 1 as x")
        with pytest.raises(SpecdraftError, match="no dataset 'nope'"):
            wh.use("nope")
    with pytest.raises(SpecdraftError, match="no specdraft warehouse"):
        specdraft.open(warehouse / "missing")


def test_report_contexts_are_the_runs_own(tmp_path):
    """Two runs of one dataset (the seed and default presets): each report's context tables are its
    own run's rows of top_hitting_contexts, grouped once (run_hitting_contexts), not both runs'."""
    from specdraft.warehouse.connection import Warehouse

    data = str(FIXTURES / "parity_traces.parquet")
    runs = [run_all(RunConfig(preset=preset, **FLAGS), tmp_path, data, "unused", name="two_runs")["run_id"]
            for preset in ("seed", "default")]
    with Warehouse(tmp_path, read_only=True, dataset="two_runs", memory_limit=None) as wh:
        for run_id in runs:
            # the top five by token ids, listed by their text (as the report does: ties in hits,
            # choices and source may list in another order than they were cut in)
            expected = wh.run_text(
                "select * from (select as_text(ctx_tokens) as context, source, hits, chosen from top_hitting_contexts "
                "where run_id = $run_id order by hits desc, chosen desc, source, ctx_tokens limit 5) "
                "order by hits desc, chosen desc, source, context", {"run_id": run_id}).fetchall()
            wh.materialize("report/run_hitting_contexts", {"run_id": run_id}, temp=True)
            assert wh.query("report/run_top_contexts", {"top": 5}).fetchall() == expected
            (chosen,), = wh.run_text("select sum(chosen) from run_hitting_contexts").fetchall()
            (own,), = wh.run_text("select count(*) from eval_positions where run_id = $run_id and ctx_len > 0",
                                  {"run_id": run_id}).fetchall()
            assert chosen == own > 0
