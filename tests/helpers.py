"""Build small warehouses from token lists or texts, for tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specdraft.sources.traces import METADATA_KEY


def write_token_traces(path: Path, traces: list[tuple[str, list[int], list[int]]]) -> Path:
    """A traces Parquet straight from (split, prompt_tokens, completion_tokens), no tokenizer."""
    split_rows: dict[str, int] = {}
    rows = []
    for trace_id, (split, prompt, completion) in enumerate(traces):
        rows.append(
            {
                "trace_id": trace_id,
                "split": split,
                "split_row": split_rows.get(split, 0),
                "prompt": "",
                "completion": "",
                "prompt_tokens": prompt,
                "completion_tokens": completion,
            }
        )
        split_rows[split] = split_rows.get(split, 0) + 1
    schema = pa.schema(
        [
            ("trace_id", pa.int64()),
            ("split", pa.string()),
            ("split_row", pa.int64()),
            ("prompt", pa.string()),
            ("completion", pa.string()),
            ("prompt_tokens", pa.list_(pa.int32())),
            ("completion_tokens", pa.list_(pa.int32())),
        ],
        metadata={METADATA_KEY: json.dumps({"tokenizer": "test", "tokenizer_fingerprint": "test"}).encode()},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def write_text_traces(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A seed-shaped input file from (split, problem, raw_reasoning)."""
    table = pa.table(
        {
            "problem": [r[1] for r in rows],
            "problem_source": pa.nulls(len(rows), pa.string()),
            "raw_reasoning": [r[2] for r in rows],
            "split": [r[0] for r in rows],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def stored_compressions(wh, table):
    """Each column's compressions in the table's row groups (after a checkpoint has written them)."""
    wh.run_text("checkpoint")
    return {column: set(kinds.split(",")) for column, kinds in wh.run_text(
        "select column_name, string_agg(distinct compression, ',') from pragma_storage_info(?) "
        "where segment_type <> 'VALIDITY' group by column_name", [table]).fetchall()}
