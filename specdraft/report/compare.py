"""`specdraft compare RUN_A RUN_B`: two recorded runs side by side, and where B gains or loses.

Runs compare across presets, and across datasets that share a tokenizer (the same vocabulary
fingerprint): the headline metrics, each source alone and acceptance by response position always;
per trace and per position (where the two runs chose differently) only when both evaluated the
same eval traces, i.e. the same dataset and eval split.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
import pyarrow as pa

from specdraft.errors import SpecdraftError
from specdraft.files import write_text
from specdraft.report.charts import multi_draft_items, text_table
from specdraft.report.html import visible_whitespace
from specdraft.report.results import load_run
from specdraft.warehouse.connection import Warehouse

HEADLINE = ("selected", "oracle_best", "decode_step")
TOP_TRACES = 5  # traces listed where B gains most and loses most
EXAMPLES = 12  # positions shown as text on the HTML page
CONTEXT_BEFORE, CONTEXT_AFTER = 40, 16


def compare_runs(warehouse: Path, run_a: str, run_b: str) -> dict:
    """Both runs' figures side by side (A, B, B - A), as a dict for the text table and the page."""
    a, b = load_run(warehouse, run_a), load_run(warehouse, run_b)
    if a["tokenizer"]["fingerprint"] != b["tokenizer"]["fingerprint"]:
        raise SpecdraftError(f"runs {a['run_id']} and {b['run_id']} were tokenized with different vocabularies "
                             f"({a['tokenizer']['name']}, {b['tokenizer']['name']}): their tokens do not compare")
    headline = [(key, a[key]["avg_accepted"], b[key]["avg_accepted"]) for key in HEADLINE]
    both_multi = [k for k, _ in multi_draft_items(a) if k in b.get("multi_draft", {})]
    headline += [(f"multi-draft {k}", a["multi_draft"][k]["avg_accepted"], b["multi_draft"][k]["avg_accepted"])
                 for k in both_multi]
    sources = dict.fromkeys([*a["per_source"], *b["per_source"]])
    by_source = [(name, a["per_source"].get(name, {}).get("avg_accepted"),
                  b["per_source"].get(name, {}).get("avg_accepted")) for name in sources]
    (pa_, buckets_a, data_a), (pb, buckets_b, data_b) = (_run_tables(warehouse, run) for run in (a, b))
    out = {
        "a": _about(a), "b": _about(b),
        "headline": headline,
        "by_source": by_source,
        "by_position": [(k, buckets_a.get(k), buckets_b.get(k)) for k in sorted({*buckets_a, *buckets_b})],
        "same_traces": _same_data(a, b, data_a, data_b) and _same_traces(pa_, pb),
    }
    if out["same_traces"]:
        out["by_trace"] = _by_trace(pa_, pb)
        out["choices"], out["examples"] = _differing_choices(warehouse, a, pa_, pb)
    return out


def _same_data(a: dict, b: dict, data_a: str | None, data_b: str | None) -> bool:
    """Did both runs evaluate the same dataset as ingested (their run_data: not one ingested
    afresh between them; an append keeps its traces)? Runs recorded before run_builds are taken
    at their dataset's name."""
    return a["dataset"] == b["dataset"] and (data_a is None or data_b is None or data_a == data_b)


def _about(run: dict) -> dict:
    return {key: run.get(key) for key in ("run_id", "dataset", "preset")} | {"tokenizer": run["tokenizer"]["name"]}


def _run_tables(warehouse: Path, run: dict) -> tuple[pa.Table, dict[int, float], str | None]:
    """The run's eval positions, its mean accepted per response-position bucket (the report's
    acceptance_by_position), and the data its tables were built from (pipeline.run_data)."""
    from specdraft.pipeline import run_data

    with Warehouse(warehouse, read_only=True, dataset=run["dataset"], memory_limit=None) as wh:
        positions = wh.query("report/run_eval_positions", {"run_id": run["run_id"]}).to_arrow_table()
        buckets = {int(bucket): float(avg) for bucket, _, avg, _ in
                   wh.query("report/run_positions", {"run_id": run["run_id"]}).fetchall()}
        data = run_data(wh, run["run_id"])
    return positions, buckets, data


def _same_traces(a: pa.Table, b: pa.Table) -> bool:
    return (a.num_rows == b.num_rows and a.column("trace_id").equals(b.column("trace_id"))
            and a.column("pos").equals(b.column("pos")))


def _by_trace(a: pa.Table, b: pa.Table) -> dict:
    """Per eval trace, mean accepted in A and B: the TOP_TRACES where B gains most and loses most."""
    trace_ids = a.column("trace_id").to_numpy()
    unique, inverse, counts = np.unique(trace_ids, return_inverse=True, return_counts=True)
    mean_a = np.bincount(inverse, weights=a.column("accepted").to_numpy()) / counts
    mean_b = np.bincount(inverse, weights=b.column("accepted").to_numpy()) / counts
    order = np.argsort(mean_b - mean_a, kind="stable")
    rows = [(int(unique[i]), int(counts[i]), float(mean_a[i]), float(mean_b[i])) for i in range(len(unique))]
    gain = mean_b - mean_a
    return {"traces": len(unique), "gained": int((gain > 0).sum()), "lost": int((gain < 0).sum()),
            "most_gained": [rows[i] for i in order[::-1][:TOP_TRACES] if gain[i] > 0],
            "most_lost": [rows[i] for i in order[:TOP_TRACES] if gain[i] < 0]}


def _differing_choices(warehouse: Path, run: dict, a: pa.Table, b: pa.Table) -> tuple[dict, list]:
    """Where the two runs chose a different source (its name holds its context length): how
    often, how B did there, and the EXAMPLES positions with the largest differences, as text
    (none where the dataset's traces changed since the runs: the text would be another's)."""
    from specdraft.pipeline import data_changed_since

    source_a, source_b = (t.column("source").to_numpy(zero_copy_only=False) for t in (a, b))
    acc_a, acc_b = (t.column("accepted").to_numpy() for t in (a, b))
    differ = np.flatnonzero(source_a != source_b)
    summary = {"positions": a.num_rows, "differ": len(differ),
               "b_better": int((acc_b[differ] > acc_a[differ]).sum()),
               "b_worse": int((acc_b[differ] < acc_a[differ]).sum())}
    picked = differ[np.argsort(-np.abs(acc_b[differ] - acc_a[differ]), kind="stable")[:EXAMPLES]]
    picked = np.sort(picked)
    if not len(picked):
        return summary, []
    trace_ids, positions = a.column("trace_id").to_numpy()[picked], a.column("pos").to_numpy()[picked]
    with Warehouse(warehouse, read_only=True, dataset=run["dataset"], memory_limit=None) as wh:
        if data_changed_since(wh, run["run_id"]):
            summary["examples_note"] = TEXT_GONE
            return summary, []
        wh.register("compare_examples", pa.table({"trace_id": trace_ids, "pos": positions}))
        texts = {(t, p): (before, after) for t, p, before, after in wh.query(
            "report/position_text", {"before": CONTEXT_BEFORE, "after": CONTEXT_AFTER}).fetchall()}
    examples = [
        {"trace_id": int(t), "pos": int(p), "before": texts[int(t), int(p)][0], "after": texts[int(t), int(p)][1],
         "a": (str(source_a[i]), int(acc_a[i])), "b": (str(source_b[i]), int(acc_b[i]))}
        for i, t, p in zip(picked.tolist(), trace_ids.tolist(), positions.tolist())
    ]
    return summary, examples


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _delta(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None else f"{b - a:+.3f}"


def _rows(rows) -> list[tuple[str, ...]]:
    return [(str(name), _number(a), _number(b), _delta(a, b)) for name, a, b in rows]


# why no position's text is shown: the traces were replaced, so the text at a position is another's
TEXT_GONE = "the dataset was ingested afresh since these runs"


def compare_text(cmp: dict) -> str:
    """The comparison as text tables for stdout."""
    a, b = cmp["a"], cmp["b"]
    lines = [f"A: run {a['run_id']} ({a['dataset']}, preset {a['preset']})",
             f"B: run {b['run_id']} ({b['dataset']}, preset {b['preset']})", ""]
    header = ("", "A", "B", "B - A")
    lines += text_table(("metric", *header[1:]), _rows(cmp["headline"]), left_first=True) + [""]
    lines += ["each source alone:"] + text_table(("source", *header[1:]), _rows(cmp["by_source"]), left_first=True)
    lines += ["", "by response position (32-token buckets):"]
    lines += text_table(("positions", *header[1:]),
                        _rows((f"{k}-{k + 31}", x, y) for k, x, y in cmp["by_position"]), left_first=True)
    if not cmp["same_traces"]:
        lines += ["", "per trace and per position: not compared (the runs evaluated different eval traces)"]
        return "\n".join(lines)
    trace = cmp["by_trace"]
    lines += ["", f"by trace: B gains on {trace['gained']} and loses on {trace['lost']} of {trace['traces']} traces"]
    for label, rows in (("most gained", trace["most_gained"]), ("most lost", trace["most_lost"])):
        lines += [f"  {label}:"] + ["    " + row for row in text_table(
            ("trace", "positions", "A", "B", "B - A"),
            [(str(t), str(n), f"{x:.3f}", f"{y:.3f}", f"{y - x:+.3f}") for t, n, x, y in rows], left_first=True)]
    choices = cmp["choices"]
    lines += ["", (f"choices: B chose another source at {choices['differ']} of {choices['positions']} positions; "
                   f"there it accepted more at {choices['b_better']} and less at {choices['b_worse']}")]
    if choices.get("examples_note"):
        lines += [f"examples (--html) not shown: {choices['examples_note']}"]
    return "\n".join(lines)


def compare_html(cmp: dict) -> str:
    """The same tables as a self-contained page, with example positions as text where the runs
    chose differently (whitespace shown: ⏎ a newline, · a space)."""
    a, b = cmp["a"], cmp["b"]

    def table(table_id: str, header: tuple[str, ...], rows) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
        return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'

    parts = [f"<h2>Headline</h2>{table('headline', ('metric', 'A', 'B', 'B - A'), _rows(cmp['headline']))}",
             f"<h2>Each source alone</h2>{table('sources', ('source', 'A', 'B', 'B - A'), _rows(cmp['by_source']))}",
             "<h2>By response position</h2>" + table(
                 "positions", ("positions", "A", "B", "B - A"),
                 _rows((f"{k}-{k + 31}", x, y) for k, x, y in cmp["by_position"]))]
    if cmp["same_traces"]:
        trace = cmp["by_trace"]
        rows = [(str(t), str(n), f"{x:.3f}", f"{y:.3f}", f"{y - x:+.3f}")
                for t, n, x, y in trace["most_gained"] + trace["most_lost"]]
        parts.append(f"<h2>By trace</h2><p>B gains on {trace['gained']} and loses on {trace['lost']} of "
                     f"{trace['traces']} traces; the most gained and the most lost:</p>"
                     + table("traces", ("trace", "positions", "A", "B", "B - A"), rows))
        choices = cmp["choices"]
        examples = "".join(
            f'<div class="example"><p>trace {e["trace_id"]}, position {e["pos"]}: A chose '
            f'<b>{escape(e["a"][0])}</b> (accepted {e["a"][1]}), B chose <b>{escape(e["b"][0])}</b> '
            f'(accepted {e["b"][1]})</p><pre><span class="before">{escape(visible_whitespace(e["before"]))}</span>'
            f'<span class="after">{escape(visible_whitespace(e["after"]))}</span></pre></div>'
            for e in cmp["examples"])
        parts.append(f"<h2>Where the runs chose differently</h2><p>At {choices['differ']} of "
                     f"{choices['positions']} positions; B accepted more at {choices['b_better']} and less at "
                     f"{choices['b_worse']}. "
                     + (f"Examples not shown: {escape(choices['examples_note'])}.</p>" if choices.get("examples_note")
                        else "Below, the positions with the largest differences: the text before the position, "
                             "then (highlighted) the tokens its drafts had to match.</p>")
                     + f'<div id="examples">{examples}</div>')
    else:
        parts.append("<p>Per trace and per position: not compared (the runs evaluated different eval traces).</p>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specdraft compare {escape(a['run_id'])} {escape(b['run_id'])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:960px}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}}pre{{white-space:pre-wrap}}
.after{{background:#ffe8a3}}</style>
</head><body>
<h1>specdraft compare</h1>
<p>A: run {escape(a['run_id'])} ({escape(str(a['dataset']))}, preset {escape(str(a['preset']))});
B: run {escape(b['run_id'])} ({escape(str(b['dataset']))}, preset {escape(str(b['preset']))}).</p>
{"".join(parts)}
</body></html>
"""


def write_compare_html(cmp: dict, path: Path) -> Path:
    return write_text(path, compare_html(cmp))
