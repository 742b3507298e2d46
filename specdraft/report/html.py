"""A run's report as one self-contained HTML page (no scripts, no CDN): the accepted-tokens
histogram, each source alone, acceptance by position in the response, and the contexts the
chosen drafts hit most, as text.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from specdraft.errors import SpecdraftError
from specdraft.files import write_text
from specdraft.report.charts import histogram_svg, line_chart_svg, multi_draft_items, nice_axis, svg_open
from specdraft.report.trace_browser import BROWSER_STYLE, browser_data, browser_section
from specdraft.warehouse.connection import Warehouse

BAR_COLOUR = "#0072B2"
ORACLE_COLOUR = "#E69F00"


def visible_whitespace(text: str) -> str:
    """Text with its whitespace shown: a newline as ⏎, a space as ·, a tab as →.

    >>> visible_whitespace("a b\\n")
    'a·b⏎'
    """
    return text.replace("\n", "⏎").replace(" ", "·").replace("\t", "→")


def bars_svg(items: list[tuple[str, float]], title: str, unit: str = "accepted tokens / position") -> str:
    """Horizontal bars, one per (label, value), largest first; each bar is a rect.bar with a tooltip."""
    items = sorted(items, key=lambda item: -item[1])
    row, left, width = 26, 190, 720
    height = 40 + row * len(items) + 30
    top = max((value for _, value in items), default=1.0) or 1.0
    parts = svg_open(title, f"{title}: one bar per source, {unit}", width=width, height=height)
    for i, (label, value) in enumerate(items):
        y = 40 + i * row
        w = (width - left - 90) * value / top
        parts.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" font-size="12">{escape(label)}</text>')
        parts.append(f'<rect class="bar" x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{BAR_COLOUR}">'
                     f"<title>{escape(label)}: {value:.3f}</title></rect>")
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 15}" font-size="12">{value:.3f}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" font-size="12">{escape(unit)}</text></svg>')
    return "".join(parts)


def position_svg(rows: list[tuple[int, int, float, float]], title: str) -> str:
    """Columns per response-position bucket: mean accepted (and the oracle's, lighter behind), on a
    labelled y axis of accepted tokens."""
    width, height, left, bottom, top_pad = 900, 320, 70, 50, 40
    top, tick = nice_axis(max([r[3] for r in rows] + [r[2] for r in rows] + [1.0]), max_ticks=5)
    n = max(len(rows), 1)
    step = (width - left - 20) / n
    plot = height - bottom - top_pad
    base = height - bottom
    parts = svg_open(title, f"{title}: mean accepted tokens (and the oracle's) per 32-token bucket",
                     width=width, height=height)
    parts.append('<g class="y-axis">')
    for i in range(round(top / tick) + 1):
        y = base - plot * i * tick / top
        parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="{"#333333" if i == 0 else "#dddddd"}" stroke-width="1"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{i * tick:g}</text>')
    parts.append(f'<text x="18" y="{top_pad + plot / 2:.1f}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 18 {top_pad + plot / 2:.1f})">accepted tokens per position</text></g>')
    for i, (bucket, positions, avg, oracle) in enumerate(rows):
        x = left + i * step
        for value, colour, cls, name in ((oracle, ORACLE_COLOUR, "oracle", "oracle"), (avg, BAR_COLOUR, "bar", "chosen")):
            h = plot * value / top
            parts.append(f'<rect class="{cls}" x="{x + 1:.1f}" y="{base - h:.1f}" width="{max(step - 2, 1):.1f}" '
                         f'height="{h:.1f}" fill="{colour}"><title>positions {bucket}-{bucket + 31}: '
                         f"{name} {value:.3f} over {positions} positions</title></rect>")
        if i % max(n // 10, 1) == 0:
            parts.append(f'<text x="{x + step / 2:.1f}" y="{base + 16}" text-anchor="middle" '
                         f'font-size="11">{bucket}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">'
                 "response position (32-token buckets); blue: chosen, orange: oracle</text></svg>")
    return "".join(parts)


CONTEXTS_GONE = "Not shown: the dataset was ingested afresh since this run."


def build_html(results: dict, positions: list, contexts: list, longest: list = (), browser: dict | None = None,
               contexts_note: str = "") -> str:
    per_source = [(name, s["avg_accepted"]) for name, s in results.get("per_source", {}).items()]
    headline = "".join(
        f"<tr><td>{escape(name)}</td><td>{results[key]['avg_accepted']:.3f}</td>"
        f"<td>{100 * results[key]['hit_rate']:.1f}%</td><td>{results[key]['positions']}</td></tr>"
        for key, name in (("selected", "selected"), ("oracle_best", "oracle best"), ("decode_step", "decode step"))
        if key in results
    )
    context_rows = "".join(
        f"<tr><td><code>{escape(visible_whitespace(text))}</code></td><td>{escape(source)}</td><td>{hits}</td>"
        f"<td>{chosen}</td></tr>"
        for text, source, hits, chosen in contexts
    )
    longest_rows = "".join(
        f"<tr><td><code>{escape(visible_whitespace(text))}</code></td><td>{ctx_len}</td><td>{escape(source)}</td>"
        f"<td>{hits}</td><td>{chosen}</td></tr>"
        for text, ctx_len, source, hits, chosen in longest
    )
    config = escape(json.dumps(results.get("config", {}), sort_keys=True))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>specdraft run {escape(str(results.get("run_id", "")))}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:960px}}table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left}}code,pre{{white-space:pre-wrap}}
{BROWSER_STYLE}</style>
</head><body>
<h1>specdraft run {escape(str(results.get("run_id", "")))}</h1>
<p>dataset <b>{escape(str(results.get("dataset")))}</b>, preset {escape(str(results.get("preset", "seed")))},
tokenizer {escape(str(results.get("tokenizer", {}).get("name")))}; train {results.get("train_examples")},
calibration {results.get("calibration_examples")}, eval {results.get("eval_examples")}.</p>
<table id="headline"><tr><th>metric</th><th>avg accepted</th><th>hit rate</th><th>positions</th></tr>{headline}</table>
<h2>Accepted tokens per position</h2><div id="histogram">{histogram_svg(results)}</div>
<h2>Each source alone</h2><div id="sources">{bars_svg(per_source, "each source alone")}</div>
<h2>Acceptance by position in the response</h2>
<div id="positions">{position_svg(positions, "mean accepted by response position")}</div>
{_multi_draft_section(results)}{_draft_length_section(results)}<h2>Contexts the chosen drafts hit most</h2>
{f'<p id="contexts-note">{escape(contexts_note)}</p>' if contexts_note else ""}
<table id="contexts"><tr><th>context</th><th>source</th><th>hits</th><th>chosen</th></tr>{context_rows}</table>
<h2>The longest contexts the chosen drafts hit after</h2>
<p>Whitespace shown: ⏎ a newline, · a space.</p>
<table id="longest-contexts"><tr><th>context</th><th>tokens</th><th>source</th><th>hits</th><th>chosen</th></tr>
{longest_rows}</table>
{browser_section(browser) if browser else ""}
<h2>Config</h2><pre>{config}</pre>
</body></html>
"""


def _multi_draft_section(results: dict) -> str:
    """Several drafts verified at once: the top-k drafts and the token trees, every position and
    decode step (--preset default)."""
    multi, decode = results.get("multi_draft", {}), results.get("multi_draft_decode_step", {})
    if not multi:
        return ""
    rows = "".join(f"<tr><td>{escape(name)}</td><td>{s['avg_accepted']:.3f}</td>"
                   f"<td>{decode[name]['avg_accepted']:.3f}</td></tr>" if name in decode else
                   f"<tr><td>{escape(name)}</td><td>{s['avg_accepted']:.3f}</td><td></td></tr>"
                   for name, s in multi_draft_items(results))
    return ("<h2>Several drafts verified at once</h2><p>top<i>k</i>: the best of the <i>k</i> best-scored "
            "distinct drafts; tree_b<i>B</i>: a token tree of at most <i>B</i> tokens; all_drafts: the best "
            "of every draft they choose from (the selectable ones and the evidence drafts).</p>"
            '<table id="multi-draft"><tr><th>drafts</th><th>every position</th><th>decode step</th></tr>'
            f"{rows}</table>\n")


def _draft_length_section(results: dict) -> str:
    """Tokens drafted against tokens accepted per decode step, one point per length policy, and
    each policy's expected speedup at each verify cost."""
    study = results.get("draft_length")
    if not study:
        return ""
    fixed, adaptive = study["fixed"], study["adaptive"]
    series = [
        ("fixed", "fixed length 1-16", [(v["drafted_per_step"], v["accepted_per_step"]) for v in fixed.values()]),
        ("adaptive", "adaptive (c = 0 ... 0.1)",
         [(v["drafted_per_step"], v["accepted_per_step"]) for v in adaptive.values()]),
    ]
    chart = line_chart_svg(series, "Accepted against drafted tokens per decode step",
                           "drafted tokens per step", "accepted tokens per step")
    rows = ""
    for cost in (str(c) for c in study["verify_costs"]):
        best_name, best = max(fixed.items(), key=lambda item: item[1]["speedup"][cost])
        rows += (f"<tr><td>{cost}</td><td>{fixed[f'fixed_{len(fixed)}']['speedup'][cost]:.4f}</td>"
                 f"<td>{best['speedup'][cost]:.4f} ({escape(best_name)})</td>"
                 f"<td>{adaptive[cost]['speedup_at_its_cost']:.4f} "
                 f"({adaptive[cost]['drafted_per_step']:.2f} drafted)</td></tr>")
    return ("<h2>Draft length</h2><p>A verify step costs 1 + c &times; drafted tokens; the expected speedup is "
            "(1 + accepted) / (1 + c &times; drafted), averaged over decode steps.</p>"
            f'<div id="draft-length">{chart}</div>'
            '<table id="draft-length-speedup"><tr><th>c</th><th>fixed 16</th><th>best fixed length</th>'
            f"<th>adaptive</th></tr>{rows}</table>\n")


def write_html_report(warehouse: Path, results: dict, path: Path, top: int = 20, all_traces: bool = False) -> Path:
    """Read the run's per-position tables from the warehouse and write the page (its trace browser
    embeds some eval traces, or with all_traces every one)."""
    from specdraft.pipeline import data_changed_since

    run_id = results.get("run_id")
    if not run_id:
        raise SpecdraftError("this run has no run_id; record it with `specdraft run` first")
    with Warehouse(warehouse, read_only=True, dataset=results["dataset"], memory_limit=None) as wh:
        positions = wh.query("report/run_positions", {"run_id": run_id}).fetchall()
        contexts, longest, contexts_note = [], [], CONTEXTS_GONE
        # the contexts' text and counts, like the browser's traces, come from the dataset's traces
        # as they are now: none where they were replaced since the run (another trace's text)
        replaced = data_changed_since(wh, run_id)
        if not replaced:
            wh.materialize("report/run_hitting_contexts", {"run_id": run_id}, temp=True)
            contexts = wh.query("report/run_top_contexts", {"top": top}).fetchall()
            longest = wh.query("report/run_longest_contexts", {"top": top}).fetchall()
            contexts_note = ""
        browser = browser_data(wh, results, all_traces, replaced)
    return write_text(path, build_html(results, positions, contexts, longest, browser, contexts_note))
