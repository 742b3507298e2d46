"""Tests for the histogram SVG and the stdout summary table (specdraft.report.charts)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from specdraft.report.charts import histogram_svg, summary_table, write_histogram_svg

NS = {"svg": "http://www.w3.org/2000/svg"}
DATASET = "toy <&> traces"


def _summary(histogram: dict[str, int], draft_len: int = 4) -> dict:
    values = [k for k, c in histogram.items() for _ in range(c)]
    values = [int(v) for v in values]
    hits = [v for v in values if v]
    return {
        "positions": len(values),
        "avg_accepted": sum(values) / len(values),
        "hit_rate": len(hits) / len(values),
        "full_draft_rate": sum(v >= draft_len for v in values) / len(values),
        "avg_on_hit": sum(hits) / len(hits) if hits else 0.0,
        "histogram": histogram,
    }


@pytest.fixture
def results() -> dict:
    return {
        "dataset": DATASET,
        "draft_len": 4,
        "train_examples": 7,
        "calibration_examples": 3,
        "eval_examples": 2,
        # 10 positions, accepted total 11 -> 1.100
        "selected": _summary({"0": 4, "1": 3, "2": 2, "4": 1}),
        # 10 positions, accepted total 16 -> 1.600
        "oracle_best": _summary({"0": 2, "1": 3, "2": 3, "3": 1, "4": 1}),
        # 20 positions, 18 at zero (90%, the largest share of any bar), accepted total 2 -> 0.100
        "decode_step": _summary({"0": 18, "1": 2}),
        "per_source": {
            "copy": {**_summary({"0": 8, "2": 2}), "proposed": 3},
            "ngram": {**_summary({"0": 6, "1": 4}), "proposed": 9},
        },
        "timings_s": {"ingest": 1.25, "total": 12.34},
    }


def _bars(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [r for r in root.iter(f"{{{NS['svg']}}}rect") if "bar" in (r.get("class") or "").split()]


def test_svg_is_xml_with_one_bar_per_series_and_bucket(results):
    svg = histogram_svg(results)
    root = ET.fromstring(svg)
    assert root.tag == f"{{{NS['svg']}}}svg"
    assert root.find("svg:title", NS) is not None and root.find("svg:desc", NS) is not None
    bars = _bars(svg)
    assert len(bars) == (4 + 1) * 3
    keys = {(b.get("data-series"), b.get("data-accepted")) for b in bars}
    assert keys == {(s, str(k)) for s in ("selected", "oracle_best", "decode_step") for k in range(5)}
    assert "<script" not in svg and "http://" not in svg.replace(NS["svg"], "")


def test_bar_heights_are_proportional_to_share(results):
    bars = {(b.get("data-series"), int(b.get("data-accepted"))): b for b in _bars(histogram_svg(results))}
    heights = {key: float(b.get("height")) for key, b in bars.items()}
    tallest = max(heights, key=heights.get)
    assert tallest == ("decode_step", 0)
    # decode_step normalises by its own 20 positions: 2/20 = 10% equals selected's 1/10 at 4 accepted.
    assert heights[("decode_step", 1)] == pytest.approx(heights[("selected", 4)], abs=0.01)
    assert heights[("selected", 0)] == pytest.approx(heights[("decode_step", 0)] * 40 / 90, abs=0.01)
    assert heights[("oracle_best", 2)] == pytest.approx(heights[("selected", 1)], abs=0.01)
    assert heights[("selected", 3)] == 0 and heights[("decode_step", 4)] == 0
    # Bars stand on a common baseline.
    assert len({round(float(b.get("y")) + float(b.get("height")), 1) for b in bars.values()}) == 1


def test_tooltips_carry_exact_counts(results):
    tips = {(b.get("data-series"), int(b.get("data-accepted"))): b.find("svg:title", NS).text
            for b in _bars(histogram_svg(results))}
    assert "18 of 20 positions (90.00%)" in tips[("decode_step", 0)]
    assert "3 of 10 positions (30.00%)" in tips[("selected", 1)]
    assert "0 of 10 positions (0.00%)" in tips[("selected", 3)]
    assert tips[("oracle_best", 3)].startswith("oracle best, 3 accepted: 1 of 10")


def test_title_subtitle_and_escaping(results):
    svg = histogram_svg(results)
    assert DATASET not in svg
    assert "toy &lt;&amp;&gt; traces" in svg
    root = ET.fromstring(svg)
    expected = f"Accepted tokens per position — {DATASET}"
    assert root.find("svg:title", NS).text == expected
    texts = [t.text for t in root.iter(f"{{{NS['svg']}}}text")]
    assert expected in texts
    assert any("selected 1.100 · oracle best 1.600 · decode step 0.100" in t for t in texts)
    custom = ET.fromstring(histogram_svg(results, title="A & B"))
    assert custom.find("svg:title", NS).text == "A & B"


def test_write_histogram_svg(results, tmp_path):
    path = write_histogram_svg(results, tmp_path / "out" / "histogram.svg")
    assert path.exists()
    assert path.read_text(encoding="utf-8") == histogram_svg(results)


def test_summary_table(results):
    table = summary_table(results)
    lines = table.splitlines()
    names = ["selected", "oracle_best", "decode_step", "copy", "ngram"]
    for name in names:
        assert sum(line.split()[0] == name for line in lines if line.strip()) == 1, name
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in names}
    assert rows["selected"][1:3] == ["10", "1.100"]
    assert rows["oracle_best"][1:3] == ["10", "1.600"]
    assert rows["decode_step"][1:5] == ["20", "0.100", "10.0%", "0.0%"]
    assert rows["copy"][1:6] == ["10", "0.400", "20.0%", "0.0%", "2.000"]
    assert rows["selected"][4] == "10.0%"
    # Aligned: every row and the header have the same width up to the last column.
    widths = {len(line) for line in lines[: 2 + len(names)]}
    assert len(widths) == 1
    assert lines[-1] == f"dataset {DATASET}: train 7, calibration 3, eval 2; total 12.3s"
    assert all(ord(c) < 128 for line in lines[:-1] for c in line)


def test_trace_text_cannot_end_the_report_pages_data_block():
    """A trace's "<!--<script>" kept the browser's data block open past its </script> (only "</"
    was escaped), swallowing the page's own script: the trace list came up empty. The block now
    holds no "<" at all, and its JSON reads back as the data."""
    import json
    import re

    from specdraft.report.trace_browser import browser_section

    text = "x <!--<script> var a = 1; </script> & </b> <!-- -->"
    data = {"drafts_note": "", "draft_len": 16, "score": "a score", "traces": [{"text": text}]}
    page = browser_section(data)
    (blob,) = re.findall(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.DOTALL)
    assert "<" not in blob and json.loads(blob) == data
    assert page.count("<script") == 2 and page.count("</script>") == 2


def test_tooltips_name_the_chosen_bars_and_round_fractional_x():
    """The positions chart's tooltip called the chosen column "bar", and the draft-length chart's
    printed drafted tokens per step unrounded (0.997398)."""
    from specdraft.report.charts import line_chart_svg
    from specdraft.report.html import position_svg

    ns = {"svg": "http://www.w3.org/2000/svg"}
    positions = ET.fromstring(position_svg([(0, 40, 2.5, 3.25)], "By position"))
    tips = [rect.find("svg:title", ns).text for rect in positions.iter("{http://www.w3.org/2000/svg}rect")
            if rect.get("class") in ("bar", "oracle")]
    assert "positions 0-31: chosen 2.500 over 40 positions" in tips and not any(" bar " in t for t in tips)
    chart = ET.fromstring(line_chart_svg([("a", "fixed", [(0.997398, 1.5), (16, 2.25)])],
                                         "Chart", "drafted tokens per step", "accepted tokens per step"))
    tips = [c.find("svg:title", ns).text for c in chart.iter("{http://www.w3.org/2000/svg}circle")
            if c.get("class") == "marker"]
    assert tips == ["fixed, 0.997 drafted tokens per step: 1.500", "fixed, 16 drafted tokens per step: 2.250"]
