"""read_traces: every input form gives the seed's prompt/completion; every bad input fails in one line."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdraft.errors import SpecdraftError
from specdraft.sources import ingest
from specdraft.sources.ingest import PY_WHITESPACE, SPLITS, TRACE_SCHEMA, ColumnMap, read_traces

ROWS = [
    {"problem": "P0", "problem_source": "amc", "raw_reasoning": "  r0 \n", "split": "train"},
    {"problem": "P1", "problem_source": None, "raw_reasoning": "r1", "split": "eval"},
    {"problem": "P2", "problem_source": "", "raw_reasoning": "\tr2\u3000", "split": "train"},
    {"problem": "P3", "problem_source": "aime", "raw_reasoning": None, "split": "calibration"},
    {"problem": "P4", "problem_source": None, "raw_reasoning": "\x1cr4\x1f", "split": "train"},
]
# What the seed's build_examples() makes of ROWS (null reasoning read as "").
EXPECTED = [
    ("train", 0, "P0\n\namc", "r0"),
    ("train", 1, "P2", "r2"),
    ("train", 2, "P4", "r4"),
    ("calibration", 0, "P3\n\naime", ""),
    ("eval", 0, "P1", "r1"),
]


def rows_of(table: pa.Table) -> list[tuple]:
    return [tuple(row.values()) for row in table.to_pylist()]


def seed_rows(rows: list[dict]) -> list[tuple]:
    """The seed's own construction (minimal_spec_decode.build_examples), split by split."""
    out = []
    for split in SPLITS:
        for i, row in enumerate(r for r in rows if r["split"] == split):
            prompt = row["problem"]
            if row.get("problem_source"):
                prompt = f"{prompt}\n\n{row['problem_source']}"
            out.append((split, i, prompt, (row["raw_reasoning"] or "").strip()))
    return out


def write(path, rows: list[dict]):
    """Write rows as Parquet, JSONL or CSV, chosen by the file extension."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".csv":
        pl.DataFrame(rows, schema={k: pl.String for k in rows[0]}).write_csv(path)
    else:
        raise AssertionError(path)
    return path


def error_of(data, **kwargs) -> str:
    with pytest.raises(SpecdraftError) as info:
        read_traces(data, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- success paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".csv"])
def test_single_file_with_split_column(tmp_path, ext):
    path = write(tmp_path / f"traces{ext}", ROWS)
    table = read_traces(str(path))
    assert table.schema == TRACE_SCHEMA
    assert table.column_names == ["split", "split_row", "prompt", "completion"]
    # CSV cannot hold null (P3's reasoning, P1's source read as ""), which builds the same rows.
    assert rows_of(table) == seed_rows(ROWS) == EXPECTED


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".csv"])
def test_one_file_per_split_as_list_and_directory(tmp_path, ext):
    paths = []
    for split in SPLITS:
        rows = [{k: v for k, v in r.items() if k != "split"} for r in ROWS if r["split"] == split]
        paths.append(write(tmp_path / f"{split}{ext}", rows))
    assert rows_of(read_traces([str(p) for p in reversed(paths)])) == EXPECTED
    (tmp_path / "README.md").write_text("not data")
    assert rows_of(read_traces(str(tmp_path))) == EXPECTED
    assert rows_of(read_traces([tmp_path])) == EXPECTED


def test_a_dataset_of_files_per_split_is_known_by_what_the_reader_reads(tmp_path):
    """Several files, one per split, are named for their folder, in any order (they were named
    for the last one: two datasets' eval.parquet both made 'eval', one replacing the other), and
    their signature is the same in any order; a directory's ignores the files its reader skips
    (a README beside the data made the stored dataset, and its appends, look replaced)."""
    from specdraft.sources.dataset import dataset_name_for, source_signature

    folder = tmp_path / "set-a"
    folder.mkdir()
    paths = [str(write(folder / f"{split}.parquet", [r for r in ROWS if r["split"] == split])) for split in SPLITS]
    assert dataset_name_for(paths, "unused") == dataset_name_for(paths[::-1], "unused") == "set_a"
    assert source_signature(paths, "unused", None) == source_signature(paths[::-1], "unused", None)
    with pytest.raises(SpecdraftError, match="3 files in 2 folders; name the dataset with --name"):
        dataset_name_for([*paths[:2], str(tmp_path / "elsewhere" / "eval.parquet")], "unused")
    before = source_signature(str(folder), "unused", None)
    (folder / "README.txt").write_text("notes")
    (folder / ".partial.parquet").write_text("")
    assert source_signature(str(folder), "unused", None) == before


def test_mixed_formats_per_split(tmp_path):
    def rows_for(split):
        return [{k: v for k, v in r.items() if k != "split"} for r in ROWS if r["split"] == split]

    paths = [
        write(tmp_path / "train.parquet", rows_for("train")),
        write(tmp_path / "calibration.jsonl", rows_for("calibration")),
        write(tmp_path / "eval.csv", rows_for("eval")),
    ]
    assert rows_of(read_traces(paths)) == EXPECTED


def test_json_array_file(tmp_path):
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(ROWS))
    assert rows_of(read_traces(str(path))) == EXPECTED


def test_problem_source_column_is_optional_and_columns_can_be_renamed(tmp_path):
    rows = [
        {"q": f"Q{i}", "cot": f" c{i} ", "part": s} for i, s in enumerate(["eval", "train", "calibration"])
    ]
    path = write(tmp_path / "t.parquet", rows)
    table = read_traces(str(path), columns=ColumnMap(problem="q", reasoning="cot", split="part"))
    assert rows_of(table) == [
        ("train", 0, "Q1", "c1"),
        ("calibration", 0, "Q2", "c2"),
        ("eval", 0, "Q0", "c0"),
    ]


def test_strip_matches_python_str_strip_on_every_whitespace_char(tmp_path):
    assert PY_WHITESPACE == "".join(c for c in map(chr, range(0x110000)) if c.isspace())
    texts = [f"{c}x y{c}" for c in PY_WHITESPACE] + ["\u200bzero-width\u200b", " \n ", "", "a\u00a0"]
    rows = [{"problem": "p", "raw_reasoning": t, "split": s} for t in texts for s in SPLITS]
    table = read_traces(str(write(tmp_path / "t.parquet", rows)))
    got = [r["completion"] for r in table.to_pylist() if r["split"] == "train"]
    assert got == [t.strip() for t in texts]


def test_large_string_and_categorical_columns_are_accepted(tmp_path):
    table = pa.table(
        {
            "problem": pa.array(["a", "b", "c"], pa.large_string()),
            "raw_reasoning": pa.array(["x", "y", "z"], pa.string()).dictionary_encode(),
            "split": pa.array(list(SPLITS), pa.string()).dictionary_encode(),
            "problem_source": pa.nulls(3, pa.null()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    assert rows_of(read_traces(str(tmp_path / "t.parquet"))) == [
        ("train", 0, "a", "x"),
        ("calibration", 0, "b", "y"),
        ("eval", 0, "c", "z"),
    ]


# --- the hub path (datasets.load_dataset monkeypatched; the hub is never contacted) ------------


def test_hub_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(name, *args, **kwargs):
        calls.append(name)
        return {
            split: datasets.Dataset.from_list(
                [{k: v for k, v in r.items() if k != "split"} for r in ROWS if r["split"] == split]
            )
            for split in ("eval", "calibration", "train", "test")
        }

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert rows_of(read_traces(None)) == EXPECTED
    assert calls == ["vikhyatk/qwen-math-traces"]


@pytest.mark.parametrize(
    "error", [ConnectionError("Couldn't reach 'x' on the Hub"), OSError("DNS"), TimeoutError()]
)
def test_hub_unreachable(monkeypatch, error):
    import datasets

    def offline(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", offline)
    message = error_of(None, dataset="someone/traces")
    assert "cannot reach the Hugging Face hub" in message
    assert "someone/traces" in message
    assert "--data" in message


def test_hub_dataset_not_found(monkeypatch):
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    def missing(*args, **kwargs):
        raise DatasetNotFoundError("Dataset 'someone/nope' doesn't exist on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", missing)
    monkeypatch.setattr(ingest, "_hub_reachable", lambda: True)
    message = error_of(None, dataset="someone/nope")
    assert "someone/nope" in message and "not found" in message and "--data" in message


def test_unreachable_hub_fails_fast_from_the_cache_only(monkeypatch):
    """Without a connection, datasets is switched to its cache instead of retrying for half a minute."""
    import datasets
    from huggingface_hub import constants

    seen = []
    before = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)

    def offline_load(*args, **kwargs):
        seen.append((datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE))
        raise FileNotFoundError("not in the cache")

    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    monkeypatch.setattr(ingest, "_hub_reachable", lambda: False)
    message = error_of(None, dataset="someone/cached-nowhere")
    assert seen == [(True, True)]
    assert "cannot reach the Hugging Face hub" in message and "--data" in message
    assert (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE) == before  # restored


def test_hub_missing_split_and_column(monkeypatch):
    import datasets

    good = datasets.Dataset.from_list([{"problem": "p", "raw_reasoning": "r"}])
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: {"train": good, "eval": good})
    message = error_of(None)
    assert "'calibration'" in message and "train, eval" in message

    bad = datasets.Dataset.from_list([{"problem": "p", "reasoning": "r"}])
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: {s: bad for s in SPLITS})
    message = error_of(None)
    assert "'raw_reasoning'" in message and "problem, reasoning" in message and "split train" in message


# --- errors ----------------------------------------------------------------------------------


def test_file_not_found(tmp_path):
    missing = tmp_path / "nope.parquet"
    message = error_of(str(missing))
    assert str(missing) in message and "not found" in message


def test_unknown_extension(tmp_path):
    path = tmp_path / "traces.xlsx"
    path.write_text("x")
    message = error_of(str(path))
    assert str(path) in message and ".xlsx" in message


@pytest.mark.parametrize("name,content", [("bad.parquet", b"not parquet"), ("bad.csv", b"a,b\n\xff\xfe,1\n")])
def test_unreadable_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    message = error_of(str(path))
    assert str(path) in message and "cannot read" in message


def test_empty_jsonl(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n")
    assert str(path) in error_of(str(path))


def test_malformed_jsonl_line(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [json.dumps(r) for r in ROWS]
    lines.insert(3, '{"problem": "p", oops}')
    path.write_text("\n".join(lines) + "\n")
    message = error_of(str(path))
    assert str(path) in message and "line 4" in message


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n[1, 2]\n")
    message = error_of(str(path))
    assert str(path) in message and "line 3" in message


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".csv"])
def test_missing_column_lists_found_columns(tmp_path, ext):
    rows = [{k: v for k, v in r.items() if k != "raw_reasoning"} for r in ROWS]
    path = write(tmp_path / f"t{ext}", rows)
    message = error_of(str(path))
    assert str(path) in message and "'raw_reasoning'" in message
    assert "problem, problem_source, split" in message


def test_missing_split_column(tmp_path):
    path = write(tmp_path / "train.parquet", [{"problem": "p", "raw_reasoning": "r"}])
    message = error_of(str(path))
    assert str(path) in message and "'split'" in message and "one file per split" in message


def test_wrong_column_type(tmp_path):
    rows = [{**r, "problem": i} for i, r in enumerate(ROWS)]
    path = write(tmp_path / "t.parquet", rows)
    message = error_of(str(path))
    assert str(path) in message and "'problem'" in message and "strings" in message and "Int64" in message

    path = write(tmp_path / "t.jsonl", [{**r, "raw_reasoning": 1.5} for r in ROWS])
    message = error_of(str(path))
    assert str(path) in message and "'raw_reasoning'" in message


def test_bad_split_values(tmp_path):
    rows = ROWS + [{**ROWS[0], "split": "test"}] * 3 + [{**ROWS[0], "split": None}]
    path = write(tmp_path / "t.parquet", rows)
    message = error_of(str(path))
    assert str(path) in message and "'split'" in message
    assert "'test' (3 rows)" in message and "null (1 rows)" in message


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_empty_split(tmp_path, ext):
    path = write(tmp_path / f"t{ext}", [r for r in ROWS if r["split"] != "calibration"])
    message = error_of(str(path))
    assert str(path) in message and "'calibration'" in message and "no rows" in message


def test_empty_per_split_file(tmp_path):
    for split in SPLITS:
        write(tmp_path / f"{split}.parquet", [{"problem": "p", "raw_reasoning": "r"}])
    pq.write_table(
        pa.table({"problem": pa.array([], pa.string()), "raw_reasoning": pa.array([], pa.string())}),
        tmp_path / "eval.parquet",
    )
    message = error_of(str(tmp_path))
    assert str(tmp_path / "eval.parquet") in message and "no rows" in message


def test_null_problem_names_first_bad_row(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[2]["problem"] = None
    rows[4]["problem"] = None
    path = write(tmp_path / "t.jsonl", rows)
    message = error_of(str(path))
    assert str(path) in message and "'problem'" in message and "2 null" in message and "row 3" in message


def test_bad_per_split_file_names(tmp_path):
    one = [{"problem": "p", "raw_reasoning": "r"}]
    paths = [write(tmp_path / f"{s}.parquet", one) for s in ("train", "calibration", "test")]
    message = error_of(paths)
    assert str(paths[2]) in message and "'test'" in message

    message = error_of(paths[:2])
    assert "eval" in message and "no file" in message

    dup = write(tmp_path / "train.jsonl", one)
    message = error_of([*paths[:2], dup])
    assert str(dup) in message and "'train'" in message

    (tmp_path / "test.parquet").unlink()
    (tmp_path / "train.jsonl").unlink()
    write(tmp_path / "traces.csv", one)
    message = error_of(str(tmp_path))
    assert str(tmp_path / "traces.csv") in message


def test_empty_directory(tmp_path):
    message = error_of(str(tmp_path))
    assert str(tmp_path) in message and "no .parquet" in message


# --- input id columns are not read ------------------------------------------------------------


def test_duplicate_input_ids_cannot_collide(tmp_path):
    """Traces are identified by split and row order; an input's own id columns are not read, so
    rows sharing an id all become traces, and the run equals the one on the same rows without ids."""
    from specdraft.config import RunConfig
    from specdraft.pipeline import run_all

    from .conftest import FIXTURES

    plain = pl.read_parquet(FIXTURES / "parity_traces.parquet")
    with_ids = plain.with_columns(pl.lit("same").alias("id"), (pl.int_range(pl.len()) % 7).alias("problem_id"))
    assert with_ids["problem_id"].n_unique() < with_ids.height  # duplicates, within and across splits
    cfg = RunConfig(preset="seed", max_completion_tokens=160)
    results, traces = {}, {}
    for label, frame in (("plain", plain), ("ids", with_ids)):
        frame.write_parquet(tmp_path / f"{label}.parquet")
        results[label] = run_all(cfg, tmp_path / label, str(tmp_path / f"{label}.parquet"), "unused", name="ds")
        traces[label] = pl.read_parquet(tmp_path / label / "traces" / "ds.parquet")
    assert traces["ids"]["trace_id"].n_unique() == traces["ids"].height == with_ids.height
    assert traces["ids"].equals(traces["plain"])
    for key in ("selected", "oracle_best", "decode_step", "per_source", "train_examples", "calibration_examples",
                "eval_examples"):
        assert results["ids"][key] == results["plain"][key], key
