"""The default preset: the confidence policy over more sources, multi-draft metrics, leave-one-out."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.live.confidence import Candidate, scoring_indexes
from specdraft.pipeline import run_all
from specdraft.policy.confidence import SELECTABLE, scoring_rows

from .conftest import FIXTURES

FLAGS = {"max_completion_tokens": 160, "max_index_positions": 5000, "backoff_max_index_positions": 6000}


@pytest.fixture(scope="module")
def leave_one_out_run(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("warehouse")
    results = run_all(RunConfig(**FLAGS), warehouse, str(FIXTURES / "parity_traces.parquet"), "unused",
                      leave_one_out=True)
    return warehouse, results


@pytest.fixture(scope="module")
def results(leave_one_out_run):
    return leave_one_out_run[1]


def test_metrics_are_ordered(results):
    avg = {k: results[k]["avg_accepted"] for k in ("selected", "oracle_best")}
    multi = {k: v["avg_accepted"] for k, v in results["multi_draft"].items()}
    assert 0 < avg["selected"] <= multi["top2"] <= multi["top4"] <= multi["all_drafts"] <= 16
    # the single pick chooses among fewer drafts than the trees (families.IN_TREES)
    assert avg["selected"] <= avg["oracle_best"] < multi["all_drafts"]  # the evidence drafts add hits
    assert multi["tree_b16"] <= multi["tree_b32"] <= multi["tree_b64"] <= multi["all_drafts"]
    assert results["preset"] == "default"


def test_every_source_reports(results):
    offline = [f for f in SELECTABLE if f != "online"]
    assert set(offline) <= set(results["per_source"]) and "online" not in results["per_source"]
    for family in offline:
        assert results["per_source"][family]["positions"] == results["selected"]["positions"]


def _selected_without(warehouse, family: str | None) -> float:
    """`selected`'s mean accepted with one family's drafts never seen by the policy, redone here
    from the warehouse's features rather than through leave_one_out_table's exclude_families: the
    family's rows are dropped in SQL (they still count in the other drafts' agreement features, as
    in the pipeline), a fresh model is fitted on the calibration rows left, and each eval position's
    pick (the first highest prediction among the selectable drafts, each draft scored from its
    first selectable copy) is made in plain Python. Where the pick is a whole chain family's draft
    (ConfidencePolicy.chain) whose first token is right, the draft is that token, the next
    position's pick, and where that is shorter, the pick's own tokens after it."""
    from specdraft.policy.confidence import ConfidencePolicy
    from specdraft.policy.evaluate import accepted_prefix
    from specdraft.warehouse.connection import Warehouse

    def features(split):
        return wh.run_text(
            "select * from candidate_features where split = $split and family is distinct from $family "
            "order by trace_id, pos, family_order, ctx_len", params={"split": split, "family": family},
        ).to_arrow_table()

    with Warehouse(warehouse, read_only=True) as wh:
        wh.use_dataset("parity_traces")
        policy = ConfidencePolicy.fit(features("calibration"), 16)
        drafts = features("eval")
        positions = wh.run_text("select sum(n_tokens - prompt_len) from selected_traces "
                                   "where split = 'eval'").fetchall()[0][0]
        tokens = {(t, p, s): d for t, p, s, d in wh.run_text(
            "select trace_id, pos, source, draft from candidates where split = 'eval'").fetchall()}
        actual = {(t, p): d for t, p, d in wh.run_text(
            "select trace_id, pos, next_tokens from token_windows where split = 'eval'").fetchall()}
    best: dict[tuple[int, int], tuple[float, int]] = {}
    scores: dict[tuple[int, int, int], float] = {}  # a draft's score: its first selectable copy's
    rows = zip(drafts.column("trace_id").to_pylist(), drafts.column("pos").to_pylist(),
               drafts.column("family").to_pylist(), drafts.column("source").to_pylist(),
               drafts.column("draft_key").to_pylist(), policy.score(drafts).tolist(),
               drafts.column("accepted").to_pylist())
    for trace_id, pos, draft_family, source, draft_key, predicted, accepted in rows:
        if draft_family not in SELECTABLE:
            continue
        predicted = scores.setdefault((trace_id, pos, draft_key), predicted)
        if (trace_id, pos) not in best or predicted > best[trace_id, pos][0]:
            best[trace_id, pos] = (predicted, accepted, draft_family, tokens[trace_id, pos, source])
    total = 0
    for (trace_id, pos), (_, accepted, draft_family, draft) in best.items():
        after = best.get((trace_id, pos + 1))
        if draft_family in policy.chain and len(draft) == 16 and accepted >= 1 and after is not None:
            chained = [draft[0], *after[3][:15]]
            chained += draft[len(chained):]
            accepted = accepted_prefix(chained, actual[trace_id, pos], 16)
        total += accepted
    return total / positions


def test_leave_one_out_equals_a_refit_without_the_source(leave_one_out_run):
    warehouse, results = leave_one_out_run
    table = results["leave_one_out"]
    assert list(table) == [f for f in SELECTABLE if f != "online"]
    # the independent replay first gives back the full run's number, so it replays the same policy
    assert _selected_without(warehouse, None) == pytest.approx(results["selected"]["avg_accepted"], abs=1e-12)
    for family, row in table.items():
        assert row["selected_without"] == pytest.approx(_selected_without(warehouse, family), abs=1e-12), family
        assert row["marginal"] == pytest.approx(results["selected"]["avg_accepted"] - row["selected_without"])
    assert any(abs(row["marginal"]) > 1e-3 for row in table.values())  # some source matters here


def test_fit_is_deterministic(tmp_path):
    data = str(FIXTURES / "parity_traces.parquet")
    first = run_all(RunConfig(**FLAGS), tmp_path / "a", data, "unused")
    second = run_all(RunConfig(**FLAGS), tmp_path / "b", data, "unused")
    assert first["selected"] == second["selected"] and first["decode_step"] == second["decode_step"]


def test_leave_one_out_needs_the_default_preset(tmp_path):
    with pytest.raises(SpecdraftError, match="--preset default"):
        run_all(RunConfig(preset="seed", **FLAGS), tmp_path, str(FIXTURES / "parity_traces.parquet"), "unused",
                leave_one_out=True)


def test_online_scenario_reads_only_earlier_traces(tmp_path):
    """Online drafts for a trace come from traces served before it: changing the last eval trace
    changes no online draft of an earlier one."""
    import pyarrow.parquet as pq

    from specdraft.warehouse.connection import Warehouse

    table = pq.read_table(FIXTURES / "parity_traces.parquet")
    changed = table.to_pylist()
    last_eval = max(i for i, row in enumerate(changed) if row["split"] == "eval")
    changed[last_eval]["raw_reasoning"] = "<think>\nSomething else entirely.\n</think> 0"
    pq.write_table(table.from_pylist(changed, schema=table.schema), tmp_path / "changed.parquet")
    drafts = []
    for name, path in (("a", FIXTURES / "parity_traces.parquet"), ("b", tmp_path / "changed.parquet")):
        results = run_all(RunConfig(online=True, **FLAGS), tmp_path / name, str(path), "unused", name="online")
        assert results["scenario"] == "online" and results["per_source"]["online"]["proposed"] > 0
        with Warehouse(tmp_path / name, read_only=True, dataset="online") as wh:
            last = wh.run_text("select max(trace_id) from selected_traces where split = 'eval'").fetchall()[0][0]
            rows = wh.run_text(
                "select trace_id, pos, source, draft from candidates where family = 'online' and trace_id < ? "
                "order by all", [last]).fetchall()
        drafts.append(rows)
    assert drafts[0] and drafts[0] == drafts[1]


def test_online_needs_the_default_preset():
    with pytest.raises(SpecdraftError, match="--preset default"):
        RunConfig(preset="seed", online=True)


def test_slow_imports_load_in_a_background_thread():
    """The pipeline starts importing the policy's slow modules (LightGBM for the default preset)
    while the earlier stages run; a module that cannot be imported is left to the stage's own
    import to report."""
    import sys
    import threading

    from specdraft.pipeline import import_in_background
    from specdraft.policy.confidence import ConfidencePolicy

    assert ConfidencePolicy.slow_imports == ("lightgbm",)
    name = "xml.dom.minidom"  # in the standard library, and imported by nothing in specdraft
    sys.modules.pop(name, None)
    import_in_background(("no_such_module_anywhere", name))
    import_in_background((name,))
    for thread in [t for t in threading.enumerate() if t.name == "slow-imports"]:
        thread.join(30)
    assert name in sys.modules


def test_scoring_a_slice_at_a_time_changes_no_prediction(leave_one_out_run, monkeypatch):
    """policy.score cuts the drafts into slices of SCORE_ROWS (a memory bound); the predictions are
    those of one call over every row, bit for bit, with slices that split positions anywhere, and
    so are those of the drafts a mask wants (evaluate scores only the IN_TREES families)."""
    from specdraft.policy import confidence
    from specdraft.warehouse.connection import Warehouse

    with Warehouse(leave_one_out_run[0], read_only=True, dataset="parity_traces") as wh:
        policy = confidence.ConfidencePolicy.calibrate(wh, RunConfig(**FLAGS))
        drafts = wh.run_text("select * from candidate_features where split = 'eval'").to_arrow_table()
    whole = confidence.raw_predict(policy.model, confidence.feature_matrix(drafts))
    monkeypatch.setattr(confidence, "SCORE_ROWS", 7)
    assert drafts.num_rows > 10 * 7
    sliced = policy.score(drafts)
    assert sliced.shape == whole.shape and (sliced == whole).all()
    # only the wanted drafts, in order, with whole slices of none wanted (rows 7 to 20)
    wanted = np.arange(drafts.num_rows) % 3 != 1
    wanted[7:21] = False
    some = policy.score(drafts, wanted)
    assert some.shape == (wanted.sum(),) and (some == whole[wanted]).all()
    assert policy.score(drafts, np.zeros(drafts.num_rows, dtype=bool)).shape == (0,)


SOURCE_FAMILIES = {"recent_copy_candidates": ("recent-copy", "recent-copy-2"),
                   "ngram_all_candidates": ("ngram-all",),
                   "copy_candidates": ("copy",), "ngram_candidates": ("ngram",)}


def _sources_are_what_candidates_holds(wh, kinds: dict[str, str]) -> None:
    for table, names in SOURCE_FAMILIES.items():
        assert wh.table_kind(table) == kinds[table], table
        columns = "trace_id, pos, family, source, ctx_len, count, score, draft"
        viewed = wh.run_text(f"select {columns} from {table} order by all").fetchall()
        held = wh.run_text(f"select {columns} from candidates where family in $names order by all",
                           params={"names": list(names)}).fetchall()
        assert viewed == held and {row[2] for row in viewed} == set(names)


def test_the_sql_sources_are_views_of_what_candidates_holds(leave_one_out_run):
    """At the default budget the SQL sources are kept as views (not written out twice): read now,
    they give exactly the drafts the candidates table holds under their families."""
    from specdraft.drafters.candidates import VIEWED_SOURCES
    from specdraft.warehouse.connection import Warehouse

    assert {table for table, _, _ in VIEWED_SOURCES} < set(SOURCE_FAMILIES)
    with Warehouse(leave_one_out_run[0], read_only=True, dataset="parity_traces") as wh:
        _sources_are_what_candidates_holds(wh, dict.fromkeys(SOURCE_FAMILIES, "VIEW"))


def test_a_small_budget_writes_the_seed_sources_out_and_a_large_one_views_them(tmp_path):
    """Under a budget too small for the views' work inside the candidates statement
    (candidates._sources_as_views), copy_candidates and ngram_candidates are tables; a later run
    at a large budget replaces them with views, and one at the small budget again with tables.
    A table an earlier version wrote in place of a view is replaced too."""
    from specdraft.pipeline import RunInputs, run_until
    from specdraft.warehouse.connection import Warehouse

    seed_sources = {"copy_candidates", "ngram_candidates"}
    small = {table: "BASE TABLE" if table in seed_sources else "VIEW" for table in SOURCE_FAMILIES}
    views = dict.fromkeys(SOURCE_FAMILIES, "VIEW")
    data = str(FIXTURES / "parity_traces.parquet")
    for budget, kinds in (("100MB", small), ("4GB", views), ("100MB", small)):
        run_until("candidates", RunConfig(**FLAGS), RunInputs(tmp_path, data, "unused", memory_limit=budget))
        with Warehouse(tmp_path, dataset="parity_traces") as wh:
            _sources_are_what_candidates_holds(wh, kinds)
            wh.mark_built("candidates", None)  # built again by the next run
    with Warehouse(tmp_path, dataset="parity_traces") as wh:  # as an earlier version left it
        wh.run_text("create or replace table recent_copy_candidates_old as from recent_copy_candidates")
        wh.run_text("drop view recent_copy_candidates")
        wh.run_text("alter table recent_copy_candidates_old rename to recent_copy_candidates")
        assert wh.table_kind("recent_copy_candidates") == "BASE TABLE"
    run_until("candidates", RunConfig(**FLAGS), RunInputs(tmp_path, data, "unused"))
    with Warehouse(tmp_path, read_only=True, dataset="parity_traces") as wh:
        _sources_are_what_candidates_holds(wh, views)


# (position, family order, draft) rows: few positions, families and tokens, so drafts repeat
DRAFT_ROWS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(families.NAMES) - 1),
                                st.lists(st.integers(0, 2), max_size=3)), max_size=30)


@given(DRAFT_ROWS)
def test_a_draft_is_scored_from_the_same_row_in_the_warehouse_and_live(rows):
    """Each copy of a draft at a position takes the score of one row: the first of a choosable
    family, else the first. The evaluation (scoring_rows, over draft keys) and the live session
    (scoring_indexes, over token lists) must name the same row, or replay would not be exact."""
    rows = sorted(rows, key=lambda row: row[:2])  # candidate order: position, then family order
    choices = frozenset(families.ORDER[name] for name in SELECTABLE)
    positions = np.array([row[0] for row in rows], dtype=np.int64)
    keys = np.array([hash(tuple(row[2])) % 2**64 for row in rows], dtype=np.uint64)
    warehouse = scoring_rows(positions, keys, np.array([row[1] in choices for row in rows], dtype=bool))
    live = []
    for position in sorted(set(positions.tolist())):
        at = [i for i, row in enumerate(rows) if row[0] == position]
        candidates = [Candidate(rows[i][1], 0, 0, 0, rows[i][2]) for i in at]
        live += [at[j] for j in scoring_indexes(candidates, list(range(len(at))), choices)]
    assert warehouse.tolist() == live
    for i, scorer in enumerate(live):
        copies = [j for j, row in enumerate(rows) if row[0] == rows[i][0] and row[2] == rows[i][2]]
        choosable = [j for j in copies if rows[j][1] in choices]
        assert scorer == (choosable or copies)[0]


def test_a_family_with_no_eval_draft_is_listed_with_zero(tmp_path):
    """The seed preset lists each of its sources in per_source; the default preset left out a family
    that drafted nowhere in eval (here arithmetic and prompt autocomplete, on text with neither),
    which the compare page and the chart then showed as missing rather than 0."""
    from specdraft.policy.confidence import ConfidencePolicy

    from .helpers import write_text_traces

    names = [chr(97 + i % 26) + chr(97 + (i * 7) % 26) for i in range(40)]
    rows = [("train" if i < 30 else "calibration" if i < 35 else "eval", f"Describe animal {name}",
             f"The {name} cat sat on the mat and the {name} dog ran to the park with a ball.")
            for i, name in enumerate(names)]
    results = run_all(RunConfig(), tmp_path / "wh", str(write_text_traces(tmp_path / "words.parquet", rows)), "unused")
    expected = {name for name in ConfidencePolicy.families if name != "online"}
    assert set(results["per_source"]) == expected
    assert results["per_source"]["arithmetic"]["proposed"] == 0
    assert results["per_source"]["arithmetic"]["avg_accepted"] == 0


def test_a_recorded_run_lists_its_several_drafts_in_the_runs_order(leave_one_out_run, tmp_path):
    """results.json stores its keys sorted, so `report` of a recorded run listed the multi-draft
    figures alphabetically (all_drafts, top2, top4, tree_b16, ...) where `run` printed them as
    evaluate makes them (top-k by k, all_drafts, the trees by budget). Both now use that order:
    the summary table, report.html and compare."""
    import json

    from specdraft.report.charts import summary_table
    from specdraft.report.html import write_html_report
    from specdraft.report.results import load_run

    warehouse, results = leave_one_out_run
    recorded = json.loads(json.dumps(load_run(warehouse, results["run_id"]), sort_keys=True))
    assert list(recorded["multi_draft"]) != list(results["multi_draft"])  # what the order was up against
    names = list(results["multi_draft"])
    assert names[:3] == ["top2", "top4", "all_drafts"] and names[3:] == sorted(names[3:], key=lambda n: int(n[6:]))

    def listed(text: str) -> list[str]:
        return [name for line in text.splitlines() for name in names if line.startswith(f"multi-draft {name} ")]

    assert listed(summary_table(recorded)) == listed(summary_table(results)) == names
    page = write_html_report(warehouse, recorded, tmp_path / "report.html").read_text()
    assert [page.index(f"<td>{name}</td>") for name in names] == sorted(page.index(f"<td>{name}</td>") for name in names)
