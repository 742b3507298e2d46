"""The accepted-tokens histogram as a self-contained SVG, and a plain-text summary table for stdout."""

from __future__ import annotations

import math
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

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
    """A round upper bound for the y axis and its tick step (at most ~5 ticks)."""
    max_pct = max(max_pct, 1.0)
    for step in (1, 2, 2.5, 5, 10, 20, 25):
        if max_pct / step <= 5:
            break
    return math.ceil(max_pct / step - 1e-9) * step, step


def _text(x: float, y: float, content: str, size: int = 12, anchor: str = "middle", **attrs: str) -> str:
    extra = "".join(f" {k.replace('_', '-')}={quoteattr(v)}" for k, v in attrs.items())
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>'
            f"{escape(content)}</text>")


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
    out = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
         f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="chart-title chart-desc" '
         f'font-family={quoteattr(FONT)}>'),
        f'<title id="chart-title">{escape(title)}</title>',
        f'<desc id="chart-desc">{escape(desc)}</desc>',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        _text(WIDTH / 2, 24, title, 16, font_weight="bold", fill="#222222"),
        _text(WIDTH / 2, 44, f"avg accepted: {subtitle}", 12, fill="#555555"),
    ]
    # Legend, centred under the subtitle.
    x = WIDTH / 2 - 150
    for _, label, colour in SERIES:
        out.append(f'<rect x="{x:.1f}" y="56" width="12" height="12" fill="{colour}"/>')
        out.append(_text(x + 17, 66, label, 12, "start", fill="#222222"))
        x += 110
    # Y grid, ticks and labels.
    out.append('<g class="y-axis">')
    for i in range(round(top / step) + 1):
        value = i * step
        y = base - plot_h * value / top
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{"#333333" if i == 0 else "#dddddd"}" stroke-width="1"/>')
        out.append(_text(LEFT - 6, y + 4, f"{value:g}%", 11, "end", fill="#333333"))
    out.append("</g>")
    out.append(_text(18, TOP + plot_h / 2, "share of positions (%)", 12,
                     transform=f"rotate(-90 18 {TOP + plot_h / 2:.1f})", fill="#222222"))
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(histogram_svg(results), encoding="utf-8")
    return path


def summary_table(results: dict) -> str:
    rows = [(key, results[key]) for key, _, _ in SERIES if key in results]
    rows += [(f"multi-draft {k}", v) for k, v in results.get("multi_draft", {}).items()]
    rows += list(results.get("per_source", {}).items())
    header = ("metric", "positions", "avg accepted", "hit rate", "full draft", "avg on hit")
    cells = [(name, f"{s['positions']}", f"{s['avg_accepted']:.3f}", f"{100 * s['hit_rate']:.1f}%",
              f"{100 * s['full_draft_rate']:.1f}%", f"{s['avg_on_hit']:.3f}") for name, s in rows]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    lines = [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in cells)]
    footer = (f"dataset {results.get('dataset', '?')}: train {results.get('train_examples', 0)}, "
              f"calibration {results.get('calibration_examples', 0)}, eval {results.get('eval_examples', 0)}")
    total = results.get("timings_s", {}).get("total")
    if total is not None:
        footer += f"; total {total:.1f}s"
    loo = results.get("leave_one_out")
    if loo:
        lines.append("leave one out (selected without the source; marginal contribution):")
        lines += [f"  {name:<22}{v['selected_without']:.3f}  {v['marginal']:+.3f}" for name, v in loo.items()]
    return "\n".join([*lines, footer])
