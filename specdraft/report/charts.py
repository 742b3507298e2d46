"""The accepted-tokens histogram and a line chart (the scaling curve) as self-contained SVG, and a
plain-text summary table for stdout."""

from __future__ import annotations

import math
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from specdraft.files import write_text

# (results key, legend label, colour): Okabe-Ito, distinguishable under the common colour-vision deficiencies.
SERIES = (
    ("selected", "selected", "#0072B2"),
    ("oracle_best", "oracle best", "#E69F00"),
    ("decode_step", "decode step", "#009E73"),
)
WIDTH, HEIGHT = 900, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 84, 64
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"


def _positions(summary: dict) -> int:
    return int(summary.get("positions") or sum(summary.get("histogram", {}).values()))


def _share(summary: dict, k: int) -> tuple[int, float]:
    """(count, percent of positions) for k accepted tokens."""
    count = int(summary.get("histogram", {}).get(str(k), 0))
    n = _positions(summary)
    return count, (100.0 * count / n if n else 0.0)


def _axis_top(max_pct: float) -> tuple[float, float]:
    """The histogram's y axis: a round upper bound (at least 1%) and its step, at most ~5 ticks."""
    return nice_axis(max(max_pct, 1.0), max_ticks=5)


def _text(x: float, y: float, content: str, size: int = 12, anchor: str = "middle", **attrs: str) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(v)}" for k, v in attrs.items())
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
            f"{escape(content)}</text>")


def svg_open(title: str, desc: str, subtitle: str = "", width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    """The opening of every chart (these and report.html's): the svg element, its accessible title
    and description, a white background, and the title and subtitle lines."""
    return [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" role="img" font-family={quoteattr(FONT)}>'),
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(desc)}</desc>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        _text(width / 2, 24, title, 16, font_weight="bold", fill="#222222"),
        *([_text(width / 2, 44, subtitle, 12, fill="#555555")] if subtitle else []),
    ]


def _y_axis(top: float, step: float, plot_w: float, plot_h: float, label: str, unit: str = "") -> list[str]:
    """The y grid from 0 to `top` every `step`, with tick labels, and the rotated axis label."""
    base = TOP + plot_h
    out = ['<g class="y-axis">']
    for i in range(round(top / step) + 1):
        value = i * step
        y = base - plot_h * value / top
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{"#333333" if i == 0 else "#dddddd"}" stroke-width="1"/>')
        out.append(_text(LEFT - 6, y + 4, f"{value:g}{unit}", 11, "end", fill="#333333"))
    out.append("</g>")
    out.append(_text(18, TOP + plot_h / 2, label, 12, transform=f"rotate(-90 18 {TOP + plot_h / 2:.1f})",
                     fill="#222222"))
    return out


def histogram_svg(results: dict, title: str | None = None) -> str:
    draft_len = int(results["draft_len"])
    dataset = str(results.get("dataset", ""))
    title = title if title is not None else f"Accepted tokens per position — {dataset}"
    subtitle = " · ".join(f"{label} {results[key]['avg_accepted']:.3f}" for key, label, _ in SERIES)
    buckets = range(draft_len + 1)
    shares = {key: [_share(results[key], k) for k in buckets] for key, _, _ in SERIES}
    top, step = _axis_top(max(pct for rows in shares.values() for _, pct in rows))

    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h
    group = plot_w / (draft_len + 1)
    bar_w = group * 0.8 / len(SERIES)
    desc = (f"Grouped bar chart of the share of positions (percent) by number of accepted draft tokens, "
            f"0 to {draft_len}, for " + ", ".join(
                f"{label} ({_positions(results[key])} positions, average {results[key]['avg_accepted']:.3f})"
                for key, label, _ in SERIES) + ".")
    out = svg_open(title, desc, f"avg accepted: {subtitle}")
    # Legend, centred under the subtitle.
    x = WIDTH / 2 - 150
    for _, label, colour in SERIES:
        out.append(f'<rect x="{x:.1f}" y="56" width="12" height="12" fill="{colour}"/>')
        out.append(_text(x + 17, 66, label, 12, "start", fill="#222222"))
        x += 110
    out += _y_axis(top, step, plot_w, plot_h, "share of positions (%)", unit="%")
    # Bars, grouped by accepted-token count.
    out.append('<g class="bars">')
    for k in buckets:
        gx = LEFT + k * group + group * 0.1
        for j, (key, label, colour) in enumerate(SERIES):
            count, pct = shares[key][k]
            h = plot_h * pct / top
            tip = f"{label}, {k} accepted: {count} of {_positions(results[key])} positions ({pct:.2f}%)"
            out.append(f'<rect class="bar" data-series="{key}" data-accepted="{k}" data-count="{count}" '
                       f'x="{gx + j * bar_w:.2f}" y="{base - h:.2f}" width="{bar_w:.2f}" height="{h:.2f}" '
                       f'fill="{colour}"><title>{escape(tip)}</title></rect>')
        out.append(_text(LEFT + (k + 0.5) * group, base + 16, str(k), 11, fill="#333333"))
    out.append("</g>")
    out.append(_text(LEFT + plot_w / 2, HEIGHT - 18, "accepted draft tokens", 12, fill="#222222"))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_histogram_svg(results: dict, path) -> Path:
    return write_text(path, histogram_svg(results))


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left_first: bool = False) -> list[str]:
    """Aligned plain-text lines: the header, a rule, the rows; columns right-aligned (the first
    left-aligned with left_first).

    >>> text_table(("a", "bb"), [("1", "2")])
    ['a  bb', '-  --', '1   2']
    """
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if left_first and i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def multi_draft_items(results: dict, key: str = "multi_draft") -> list[tuple[str, dict]]:
    """results[key]'s figures in the order evaluate makes them: top-k by k, all_drafts, then the
    token trees by budget (results.json stores its keys sorted, so a recorded run's come back
    alphabetical).

    >>> [name for name, _ in multi_draft_items({"multi_draft": dict.fromkeys(
    ...     ["all_drafts", "top2", "top16", "tree_b16", "tree_b64", "tree_b8", "top4"], {})})]
    ['top2', 'top4', 'top16', 'all_drafts', 'tree_b8', 'tree_b16', 'tree_b64']
    """
    def order(name: str) -> tuple[int, int, str]:
        for rank, prefix in enumerate(("top", "all_drafts", "tree_b")):
            if name.startswith(prefix):
                number = name[len(prefix):]
                return rank, int(number) if number.isdigit() else 0, name
        return 3, 0, name

    return sorted(results.get(key, {}).items(), key=lambda item: order(item[0]))


def summary_table(results: dict) -> str:
    rows = [(key, results[key]) for key, _, _ in SERIES if key in results]
    rows += [(f"multi-draft {k}", v) for k, v in multi_draft_items(results)]
    rows += list(results.get("per_source", {}).items())
    header = ("metric", "positions", "avg accepted", "hit rate", "full draft", "avg on hit")
    cells = [(name, f"{s['positions']}", f"{s['avg_accepted']:.3f}", f"{100 * s['hit_rate']:.1f}%",
              f"{100 * s['full_draft_rate']:.1f}%", f"{s['avg_on_hit']:.3f}") for name, s in rows]
    lines = text_table(header, cells, left_first=True)
    footer = (f"dataset {results.get('dataset', '?')}: train {results.get('train_examples', 0)}, "
              f"calibration {results.get('calibration_examples', 0)}, eval {results.get('eval_examples', 0)}")
    total = results.get("timings_s", {}).get("total")
    if total is not None:
        footer += f"; total {total:.1f}s"
    chosen = results.get("draft_length", {}).get("chosen")
    if chosen:
        full = next(key for key in chosen if key.startswith("fixed_"))
        lines.append(f"draft length at --verify-cost {chosen['verify_cost']:g}: expected speedup "
                     f"{chosen['adaptive']:.3f} adaptive ({chosen['adaptive_drafted_per_step']:.2f} tokens "
                     f"drafted per step), {chosen['best_fixed_speedup']:.3f} {chosen['best_fixed']}, "
                     f"{chosen[full]:.3f} {full}")
    loo = results.get("leave_one_out")
    if loo:
        lines.append("leave one out (selected without the source; marginal contribution):")
        lines += [f"  {name:<22}{v['selected_without']:.3f}  {v['marginal']:+.3f}" for name, v in loo.items()]
    return "\n".join([*lines, footer])


def nice_axis(max_value: float, max_ticks: int = 6) -> tuple[float, float]:
    """A round upper bound for a linear axis from 0 and its tick step (at most ~max_ticks ticks).

    >>> nice_axis(2.103)
    (2.5, 0.5)
    >>> nice_axis(6988)
    (8000.0, 2000.0)
    """
    max_value = max(float(max_value), 1e-9)
    magnitude = 10 ** math.floor(math.log10(max_value / max_ticks))
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * magnitude
        if max_value / step <= max_ticks:
            break
    return float(math.ceil(max_value / step - 1e-9) * step), float(step)


def line_chart_svg(series, title: str, x_label: str, y_label: str) -> str:
    """A line chart with a marker per point, both axes linear from 0.

    `series` is a list of (key, legend label, [(x, y), ...]); a key of the histogram's SERIES
    keeps its colour there. Each marker is a `circle class="marker"` with data-series, data-x and
    data-y and a tooltip.
    """
    colours = {key: colour for key, _, colour in SERIES}
    spare = iter(("#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"))
    series = [(key, label, sorted(points), colours.get(key) or next(spare)) for key, label, points in series]
    xs = [x for *_, points, _ in series for x, _ in points]
    ys = [y for *_, points, _ in series for _, y in points]
    x_top, x_step = nice_axis(max(xs, default=1))
    y_top, y_step = nice_axis(max(ys, default=1), max_ticks=5)

    plot_w, plot_h = WIDTH - LEFT - RIGHT - 20, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def px(x: float) -> float:
        return LEFT + plot_w * x / x_top

    def py(y: float) -> float:
        return base - plot_h * y / y_top

    def _g(v: float) -> str:
        return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"

    subtitle = " · ".join(
        f"{label} {points[0][1]:.3f} → {points[-1][1]:.3f}" for _, label, points, _ in series if points)
    desc = (f"Line chart of {y_label} against {x_label}, for " + ", ".join(
        f"{label} (" + ", ".join(f"{_g(x)}: {y:.3f}" for x, y in points) + ")"
        for _, label, points, _ in series) + ".")
    out = svg_open(title, desc, subtitle)
    x = WIDTH / 2 - 55 * len(series)
    for _, label, _, colour in series:
        out.append(f'<line x1="{x:.1f}" x2="{x + 14:.1f}" y1="62" y2="62" stroke="{colour}" stroke-width="2.5"/>')
        out.append(f'<circle cx="{x + 7:.1f}" cy="62" r="3.5" fill="{colour}"/>')
        out.append(_text(x + 19, 66, label, 12, "start", fill="#222222"))
        x += 110
    out += _y_axis(y_top, y_step, plot_w, plot_h, y_label)
    out.append('<g class="x-axis">')
    for i in range(round(x_top / x_step) + 1):
        value = i * x_step
        out.append(f'<line x1="{px(value):.1f}" x2="{px(value):.1f}" y1="{base}" y2="{base + 5}" '
                   f'stroke="#333333" stroke-width="1"/>')
        out.append(_text(px(value), base + 18, _g(value), 11, fill="#333333"))
    out.append("</g>")
    out.append(_text(LEFT + plot_w / 2, HEIGHT - 18, x_label, 12, fill="#222222"))
    for key, label, points, colour in series:
        out.append(f'<g class="series" data-series={quoteattr(key)}>')
        if len(points) > 1:
            coords = " ".join(f"{px(x):.2f},{py(y):.2f}" for x, y in points)
            out.append(f'<polyline class="line" points="{coords}" fill="none" stroke="{colour}" '
                       f'stroke-width="2.5" stroke-linejoin="round"/>')
        for x, y in points:
            tip = f"{label}, {_g(x) if float(x).is_integer() else f'{x:.3f}'} {x_label}: {y:.3f}"
            out.append(f'<circle class="marker" data-series={quoteattr(key)} data-x="{_g(x)}" data-y="{y:.6g}" '
                       f'cx="{px(x):.2f}" cy="{py(y):.2f}" r="4.5" fill="{colour}" stroke="#ffffff" '
                       f'stroke-width="1.5"><title>{escape(tip)}</title></circle>')
            out.append(_text(px(x), py(y) - 10, f"{y:.3f}", 11, fill=colour))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_line_chart_svg(series, path, title: str, x_label: str, y_label: str) -> Path:
    return write_text(path, line_chart_svg(series, title, x_label, y_label))


def write_cost_curve_svg(curve: dict, path) -> Path:
    """The cost curve (specdraft.measure.bench.cost_curve) as a line chart: wall time and peak memory
    against indexed positions, each a multiple of the smallest scale's, beside the linear line."""
    points = [p for p in curve["points"] if p.get("positions_ratio") is not None]
    series = [
        ("wall_time", "wall time", [(p["positions_ratio"], p["time_ratio"]) for p in points]),
        ("peak_memory", "peak memory", [(p["positions_ratio"], p["memory_ratio"]) for p in points]),
        ("linear", "linear", [(p["positions_ratio"], p["positions_ratio"]) for p in points]),
    ]
    title = f"Cost against indexed positions — {Path(curve['data']).name}, preset {curve['preset']}"
    return write_line_chart_svg(series, path, title, "indexed positions (x the smallest scale)",
                                "cost (x the smallest scale)")
