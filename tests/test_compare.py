"""`specdraft compare`: two real runs on the parity fixture (seed and default presets, one dataset),
a third on another dataset with the same tokenizer and fewer eval traces, and a fourth with
another tokenizer."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from specdraft.cli import main
from specdraft.config import RunConfig
from specdraft.pipeline import run_all

from .conftest import FIXTURES
from .test_tokenizer import _write_local_hf_tokenizer

FLAGS = {"max_completion_tokens": 160, "max_index_positions": 5000, "backoff_max_index_positions": 6000}
DATA = str(FIXTURES / "parity_traces.parquet")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("warehouse")
    seed = run_all(RunConfig(preset="seed", **FLAGS), root, DATA, "unused", name="parity")
    default = run_all(RunConfig(**FLAGS), root, DATA, "unused", name="parity")
    small = run_all(RunConfig(eval_limit=3, **FLAGS), root, DATA, "unused", name="parity_small")
    tokenizer = tmp_path_factory.mktemp("tok") / "tiny"
    _write_local_hf_tokenizer(tokenizer)
    tiny = run_all(RunConfig(tokenizer=str(tokenizer), **FLAGS), root, DATA, "unused", name="parity_tiny")
    return root, seed, default, small, tiny


def _compare(root, a, b, *extra):
    return CliRunner().invoke(main, ["compare", a["run_id"], b["run_id"], "--warehouse", str(root), *extra])


def test_compare_presets_on_one_dataset(runs, tmp_path):
    root, seed, default, _, _ = runs
    result = _compare(root, seed, default, "--html", str(tmp_path / "compare.html"))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    # the headline side by side, B - A from the two runs' own results
    row = next(line for line in out.splitlines() if line.startswith("selected "))
    a, b, delta = (float(x) for x in row.split()[1:])
    assert (a, b) == (round(seed["selected"]["avg_accepted"], 3), round(default["selected"]["avg_accepted"], 3))
    assert delta == pytest.approx(default["selected"]["avg_accepted"] - seed["selected"]["avg_accepted"], abs=1e-3)
    assert "each source alone:" in out and "by response position" in out
    gained, lost, traces = (int(x) for x in re.search(r"B gains on (\d+) and loses on (\d+) of (\d+) traces", out).groups())
    assert traces == default["eval_examples"] and gained + lost <= traces and gained > 0
    differ, positions = (int(x) for x in re.search(r"at (\d+) of (\d+) positions", out).groups())
    assert positions == default["selected"]["positions"] and 0 < differ <= positions
    # the page: the same tables, and example positions as text with whitespace shown
    page = (tmp_path / "compare.html").read_text()
    HTMLParser().feed(page)
    assert '<table id="headline">' in page and '<table id="traces">' in page
    examples = re.findall(r'<div class="example">(.*?)</div>', page, flags=re.DOTALL)
    assert 0 < len(examples) <= 12
    assert all("A chose <b>" in e and "B chose <b>" in e and '<span class="after">' in e for e in examples)
    assert "\n" not in "".join(re.findall(r'<span class="after">(.*?)</span>', page, flags=re.DOTALL))


def test_compare_across_datasets_and_tokenizers(runs):
    root, _, default, small, tiny = runs
    result = _compare(root, default, small)
    assert result.exit_code == 0, result.stderr
    assert "not compared (the runs evaluated different eval traces)" in result.stdout
    assert "selected" in result.stdout
    refused = _compare(root, default, tiny)
    assert refused.exit_code == 1 and "different vocabularies" in refused.stderr
    missing = CliRunner().invoke(main, ["compare", default["run_id"], "nope", "--warehouse", str(root)])
    assert missing.exit_code == 1 and "no run with id 'nope'" in missing.stderr
    assert json.loads(json.dumps(small["config"]))["eval_limit"] == 3


@pytest.mark.parametrize("args", [["compare", "", "{a}"], ["compare", "{a}", " "], ["report", ""],
                                  ["export", "", "--out", "{tmp}/bundle"], ["replay", "", "--bundle", "{tmp}"]])
def test_an_empty_run_id_is_refused_not_read_as_the_latest(runs, tmp_path, args):
    """`compare "$RUN" B` with RUN unset compared the latest run, and `report ""` reported it: an
    empty id is a usage error; only a left-out one means the latest run."""
    root, seed = runs[0], runs[1]
    args = [arg.format(a=seed["run_id"], tmp=tmp_path) for arg in args]
    result = CliRunner().invoke(main, [*args, "--warehouse", str(root)])
    assert result.exit_code == 2 and "is empty (leave it out for the latest run)" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_compare_html_that_cannot_be_written_prints_nothing(runs, tmp_path):
    """The comparison was printed and then the page failed, naming a temporary file beside it
    (/proc/.x.html.PID.partial); a page path that is a directory's was written as a file; and
    unknown runs with --html made the page's folder."""
    root, seed, default = runs[0], runs[1], runs[2]
    result = _compare(root, seed, default, "--html", "/proc/specdraft-compare.html")
    assert result.exit_code == 1 and result.stdout == "", result.stdout
    assert "error: /proc/specdraft-compare.html: " in result.stderr, result.stderr
    result = _compare(root, seed, default, "--html", f"{tmp_path}/page/")
    assert result.exit_code == 2 and "names a directory" in result.stderr and not (tmp_path / "page").exists()
    result = CliRunner().invoke(main, ["compare", "nosuch", seed["run_id"], "--warehouse", str(root),
                                       "--html", str(tmp_path / "new" / "x.html")])
    assert result.exit_code == 1 and "nosuch" in result.stderr and not (tmp_path / "new").exists()
    result = _compare(root, seed, default, "--html", str(tmp_path / "new" / "x.html"))
    assert result.exit_code == 0 and result.stdout.startswith("A: run ") and (tmp_path / "new" / "x.html").is_file()


def test_lookup_of_no_text_is_refused(runs):
    result = CliRunner().invoke(main, ["lookup", " ", "--warehouse", str(runs[0])])
    assert result.exit_code == 2 and "is empty" in result.stderr and result.stdout == "", result.output
