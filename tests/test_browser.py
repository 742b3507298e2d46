"""The report and the compare page in headless Chromium (Debian's package; .ci/run installs it),
driven over the DevTools protocol (tests/browser.py): they render with no console errors, the
trace browser shows a trace, and a real pointer over a token shows every source's draft there.
Screenshots go to $SPECDRAFT_SCREENSHOTS (or the test's tmp dir)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from specdraft.config import RunConfig
from specdraft.pipeline import run_all

from .browser import CHROMIUM, Browser
from .conftest import FIXTURES

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
FLAGS = {"max_completion_tokens": 160, "max_index_positions": 5000, "backoff_max_index_positions": 6000}
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    from specdraft.report.compare import compare_runs, write_compare_html
    from specdraft.report.html import write_html_report

    root = tmp_path_factory.mktemp("warehouse")
    data = str(FIXTURES / "parity_traces.parquet")
    out = tmp_path_factory.mktemp("pages")
    seed = run_all(RunConfig(preset="seed", **FLAGS), root, data, "unused", name="parity")
    seed_report = write_html_report(root, seed, out / "seed_report.html")
    default = run_all(RunConfig(**FLAGS), root, data, "unused", name="parity")
    report = write_html_report(root, default, out / "report.html")
    # the seed run's candidates were rebuilt by the default run: its page now has no drafts
    stale = write_html_report(root, seed, out / "stale_seed_report.html")
    compare = write_compare_html(compare_runs(root, seed["run_id"], default["run_id"]), out / "compare.html")
    return report, seed_report, compare, stale


def _shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("SPECDRAFT_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def _token_centre(browser: Browser, index: int) -> tuple[float, float]:
    return tuple(browser.evaluate(
        f"(() => {{ const s = document.querySelectorAll('#trace-text span.tok')[{index}];"
        " s.scrollIntoView({block: 'center'}); const r = s.getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"))


@pytest.mark.parametrize("which", ["default", "seed"])
def test_trace_browser_shows_a_trace_and_the_drafts_under_the_pointer(pages, tmp_path, which):
    page = pages[0] if which == "default" else pages[1]
    with Browser(tmp_path / "profile") as browser:
        browser.open(page.as_uri())
        assert browser.errors() == []
        listed = browser.evaluate("document.querySelectorAll('#trace-list tbody tr').length")
        embedded = browser.evaluate("document.querySelectorAll('#trace-list tbody tr.embedded').length")
        assert listed >= embedded > 0
        tokens = browser.evaluate("document.querySelectorAll('#trace-text span.tok').length")
        assert tokens > 50 and "trace " in browser.evaluate("document.getElementById('trace-title').textContent")
        # before any pointer: no drafts; a real pointer move over a token shows that position's drafts
        assert "Point at a token" in browser.evaluate("document.getElementById('draft-panel').innerText")
        browser.move_pointer(*_token_centre(browser, 30))
        panel = browser.evaluate("document.getElementById('draft-panel').innerText")
        assert re.search(r"position \d+ \(response token 30\): chose", panel), panel
        drafts = browser.evaluate("document.querySelectorAll('#draft-panel table.drafts tr').length")
        assert drafts >= 2  # a header and at least one draft
        scores = browser.evaluate("[...document.querySelectorAll('#draft-panel table.drafts tr td:nth-child(3)')]"
                                  ".map(td => td.textContent)")
        assert any(re.fullmatch(r"-?\d+\.\d{3}", s) for s in scores)  # the policy's scores shown
        # another token, another position
        browser.move_pointer(*_token_centre(browser, 31))
        assert "(response token 31)" in browser.evaluate("document.getElementById('draft-panel').innerText")
        shot = browser.screenshot(_shots(tmp_path) / f"trace_browser_{which}.png")
        assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000
        # a real click on a column header sorts the list
        first_before = browser.evaluate("document.querySelector('#trace-list tbody tr').dataset.trace")
        x, y = browser.evaluate("(() => { const th = document.querySelector('#trace-list th[data-key=\"2\"]');"
                                " th.scrollIntoView({block: 'center'}); const r = th.getBoundingClientRect();"
                                " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        browser.click(x, y)
        first_after = browser.evaluate("document.querySelector('#trace-list tbody tr').dataset.trace")
        values = browser.evaluate("[...document.querySelectorAll('#trace-list tbody tr td:nth-child(3)')]"
                                  ".map(td => +td.textContent)")
        assert values == sorted(values) and (first_before != first_after or len(set(values)) == 1)
        assert browser.errors() == []


def test_a_run_whose_candidates_were_rebuilt_shows_no_drafts(pages, tmp_path):
    with Browser(tmp_path / "profile") as browser:
        browser.open(pages[3].as_uri())
        assert browser.errors() == []
        assert "drafts not shown: a later build replaced" in browser.evaluate("document.body.innerText")
        browser.move_pointer(*_token_centre(browser, 30))
        assert "no drafts here" in browser.evaluate("document.getElementById('draft-panel').innerText")


def test_compare_page_renders_without_errors(pages, tmp_path):
    with Browser(tmp_path / "profile") as browser:
        browser.open(pages[2].as_uri())
        assert browser.errors() == []
        assert browser.evaluate("document.querySelectorAll('#headline tr').length") >= 4
        assert browser.evaluate("document.querySelectorAll('#examples .example').length") > 0
        shot = browser.screenshot(_shots(tmp_path) / "compare.png")
        assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 10_000
