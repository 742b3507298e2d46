"""Read trace rows from the Hugging Face hub or local files into one Arrow table.

Output columns: split, split_row (0-based, source order within the split), prompt, completion.
prompt and completion are built exactly as the seed's build_examples() builds them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from specdraft.errors import SpecdraftError, first_line

SPLITS = ("train", "calibration", "eval")
DEFAULT_DATASET = "vikhyatk/qwen-math-traces"
FORMATS = {".parquet": "parquet", ".jsonl": "ndjson", ".ndjson": "ndjson", ".json": "json", ".csv": "csv"}
TRACE_SCHEMA = pa.schema(
    [("split", pa.string()), ("split_row", pa.int64()), ("prompt", pa.string()), ("completion", pa.string())]
)
# Every character Python's str.strip() removes (c.isspace()). polars' default strip_chars()
# uses Rust's White_Space set, which misses U+001C..U+001F; a test checks this list.
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_HUB_HINT = (
    "point --data at local Parquet/JSONL/CSV files (one file with a 'split' column, "
    "or one file per split: train, calibration, eval)"
)


@dataclass(frozen=True)
class ColumnMap:
    """Source column names; problem_source is optional (under its default name: another one
    named is required), split is read only from a single file."""

    problem: str = "problem"
    problem_source: str = "problem_source"
    reasoning: str = "raw_reasoning"
    split: str = "split"


def read_traces(
    data: str | os.PathLike | Sequence[str | os.PathLike] | None,
    dataset: str = DEFAULT_DATASET,
    columns: ColumnMap = ColumnMap(),
    every_split: bool = True,
) -> pa.Table:
    """All three splits as one table (train, calibration, eval), rows in source order.

    data=None loads ``dataset`` from the hub; otherwise one file with a split column, or one
    file per split (a list of files or a directory; file stems are the split names).
    every_split=False (rows to append) allows splits with no rows or no file, not no rows at all.
    """
    if data is None:
        parts = _hub_splits(dataset, columns)
    else:
        parts = _local_splits(data, columns, every_split)
    frames = []
    for split in SPLITS:
        label, frame = parts.get(split, (None, None))
        if frame is None or frame.height == 0:
            if not every_split:
                continue
            raise SpecdraftError(
                f"{label}: split {split!r} has no rows; train, calibration and eval each need at least one"
            )
        frames.append(_shape(frame, split, columns))
    if not frames:
        raise SpecdraftError(f"{data}: no rows to add")
    table = pl.concat(frames).to_arrow()
    return table.cast(TRACE_SCHEMA)


def _shape(frame: pl.DataFrame, split: str, columns: ColumnMap) -> pl.DataFrame:
    """The seed's prompt (problem + blank line + source when the source is non-empty) and completion."""
    problem = pl.col(columns.problem)
    prompt = problem
    if columns.problem_source in frame.columns:
        source = pl.col(columns.problem_source)
        has_source = source.is_not_null() & (source != "")
        prompt = pl.when(has_source).then(pl.concat_str([problem, pl.lit("\n\n"), source])).otherwise(problem)
    completion = pl.col(columns.reasoning).fill_null("").str.strip_chars(PY_WHITESPACE)
    return frame.select(
        pl.lit(split, dtype=pl.String).alias("split"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("split_row"),
        prompt.alias("prompt"),
        completion.alias("completion"),
    )


def _check_columns(frame: pl.DataFrame, label: str, columns: ColumnMap, split: bool = False) -> pl.DataFrame:
    """Keep the needed columns as strings; fail on a missing, non-string or null-problem column."""
    required = [columns.problem, columns.reasoning] + ([columns.split] if split else [])
    if columns.problem_source != ColumnMap.problem_source:  # named by the user: a typo is not "no source"
        required.append(columns.problem_source)
    for name in required:
        if name not in frame.columns:
            found = ", ".join(frame.columns) or "none"
            hint = " (or pass one file per split named train/calibration/eval)" if split else ""
            raise SpecdraftError(f"{label}: missing column {name!r}; columns found: {found}{hint}")
    keep = required + ([columns.problem_source] if columns.problem_source in frame.columns
                       and columns.problem_source not in required else [])
    # one column in two roles (--reasoning-column problem) failed in polars' select with a traceback
    roles = {"problem": columns.problem, "reasoning": columns.reasoning}
    roles |= {"split": columns.split} if split else {}
    roles |= {"problem-source": columns.problem_source} if columns.problem_source in keep else {}
    role_of: dict[str, str] = {}
    for role, name in roles.items():
        if name in role_of:
            raise SpecdraftError(f"{label}: --{role_of[name]}-column and --{role}-column both name column {name!r}; "
                                 "each needs a column of its own")
        role_of[name] = role
    frame = frame.select(keep)
    for name in keep:
        dtype = frame.schema[name]
        if not (dtype == pl.String or dtype == pl.Null or isinstance(dtype, (pl.Categorical, pl.Enum))):
            raise SpecdraftError(f"{label}: column {name!r} must hold strings, found {dtype}")
    frame = frame.with_columns(pl.col(keep).cast(pl.String))
    nulls = frame[columns.problem].is_null()
    if nulls.any():
        first = int(nulls.arg_true()[0]) + 1
        raise SpecdraftError(
            f"{label}: column {columns.problem!r} has {nulls.sum()} null value(s), first at row {first}"
        )
    return frame


def _split_by_column(frame: pl.DataFrame, label: str, column: str) -> dict[str, tuple[str, pl.DataFrame]]:
    values = pl.col(column)
    bad = (
        frame.filter(values.is_null() | ~values.is_in(SPLITS))
        .group_by(column, maintain_order=True)
        .len()
        .rows()
    )
    if bad:
        listed = ", ".join(f"{'null' if v is None else repr(v)} ({n} rows)" for v, n in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise SpecdraftError(
            f"{label}: column {column!r} has values other than train, calibration, eval: {listed}{more}"
        )
    return {split: (label, frame.filter(values == split)) for split in SPLITS}


def _local_splits(data, columns: ColumnMap, every_split: bool = True) -> dict[str, tuple[str, pl.DataFrame]]:
    paths = [Path(data)] if isinstance(data, (str, os.PathLike)) else [Path(p) for p in data]
    if not paths:
        raise SpecdraftError("--data names no files")
    if len(paths) == 1 and paths[0].is_dir():
        paths = directory_files(paths[0])
    elif len(paths) == 1:
        frame = _check_columns(_read_file(paths[0]), str(paths[0]), columns, split=True)
        return _split_by_column(frame, str(paths[0]), columns.split)
    by_split: dict[str, Path] = {}
    for path in paths:
        if path.stem not in SPLITS:
            raise SpecdraftError(
                f"{path}: with one file per split, each file must be named after its split "
                f"(train, calibration or eval), got {path.stem!r}"
            )
        if path.stem in by_split:
            raise SpecdraftError(f"{path}: split {path.stem!r} is also given by {by_split[path.stem]}")
        by_split[path.stem] = path
    missing = [split for split in SPLITS if split not in by_split]
    if missing and every_split:
        given = ", ".join(str(p) for p in paths)
        raise SpecdraftError(f"no file for split(s) {', '.join(missing)} among {given}")
    return {
        split: (str(path), _check_columns(_read_file(path), str(path), columns))
        for split, path in by_split.items()
    }


def directory_files(directory: Path) -> list[Path]:
    files = sorted(
        p
        for p in directory.iterdir()
        if p.is_file() and p.suffix.lower() in FORMATS and not p.name.startswith(".")
    )
    if not files:
        raise SpecdraftError(f"{directory}: no .parquet, .jsonl, .json or .csv files in this directory")
    return files


def _read_file(path: Path) -> pl.DataFrame:
    if not path.exists():
        raise SpecdraftError(f"{path}: file not found")
    if path.is_dir():
        raise SpecdraftError(f"{path}: is a directory; pass a directory alone, or a list of files")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise SpecdraftError(
            f"{path}: unknown file type {path.suffix!r}; expected .parquet, .jsonl, .json or .csv"
        )
    try:
        if kind == "parquet":
            return pl.read_parquet(path)
        if kind == "csv":
            # CSV cannot tell null from "": read every field as a string, empty fields as "".
            return pl.read_csv(path, infer_schema=False, empty_string_is_null=False)
        return _read_json(path)
    except SpecdraftError:
        raise
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise SpecdraftError(f"{path}: cannot read {kind} file: {first_line(exc)}") from exc


def _read_json(path: Path) -> pl.DataFrame:
    """JSON Lines (one object per line); a .json file holding one array of objects also works."""
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
    if not head:
        raise SpecdraftError(f"{path}: file is empty")
    if head.startswith(b"["):
        return pl.read_json(path)
    try:
        return pl.read_ndjson(path, infer_schema_length=None)
    except pl.exceptions.PolarsError:
        _raise_bad_json_line(path)
        raise


def _raise_bad_json_line(path: Path) -> None:
    """polars does not say which line is malformed; find it (only runs after a failure)."""
    with path.open(encoding="utf-8", errors="strict") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecdraftError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
            if not isinstance(value, dict):
                raise SpecdraftError(f"{path}: line {number} is not a JSON object")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Can we open a connection to the hub's endpoint? (Fails in milliseconds without DNS.)"""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextmanager
def _offline_hub():
    """Make datasets use only its local cache (instead of retrying an unreachable hub)."""
    import datasets
    from huggingface_hub import constants

    saved = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _hub_splits(dataset: str, columns: ColumnMap) -> dict[str, tuple[str, pl.DataFrame]]:
    import datasets

    reachable = _hub_reachable()
    try:
        with nullcontext() if reachable else _offline_hub():
            loaded = datasets.load_dataset(dataset)
    except Exception as exc:
        if not reachable:
            raise SpecdraftError(
                f"cannot reach the Hugging Face hub for dataset {dataset!r} (and it is not cached); {_HUB_HINT}"
            ) from exc
        if type(exc).__name__ == "DatasetNotFoundError":
            raise SpecdraftError(
                f"dataset {dataset!r} was not found on the Hugging Face hub or in the local cache; {_HUB_HINT}"
            ) from exc
        if _is_connection_error(exc):
            raise SpecdraftError(
                f"cannot reach the Hugging Face hub for dataset {dataset!r} ({type(exc).__name__}); {_HUB_HINT}"
            ) from exc
        raise
    parts = {}
    for split in SPLITS:
        label = f"dataset {dataset} split {split}"
        if split not in loaded:
            found = ", ".join(loaded.keys()) or "none"
            raise SpecdraftError(f"dataset {dataset}: no {split!r} split; splits found: {found}")
        parts[split] = (label, _check_columns(loaded[split].to_polars(), label, columns))
    return parts


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    # httpx / requests / huggingface_hub errors do not all subclass OSError.
    module = type(exc).__module__.split(".")[0]
    return module in {"httpx", "httpcore", "requests", "urllib3", "huggingface_hub"}
