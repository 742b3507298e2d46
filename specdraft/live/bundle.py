"""A drafter bundle: what one recorded run's drafter needs to run live, and nothing else.

    manifest.json   format and version, the run, the tokenizer (name, fingerprint, vocabulary
                    size), the tables' context-length segments, every other file's size and sha256
    config.json     the run's RunConfig
    policy.json     the fitted policy: --preset seed, SourceAveragePolicy's global_avg and
                    source_avg; --preset default, the confidence model's baseline, choices,
                    scored families and scoring ("per-draft": one score per distinct draft)
    ngram.arrow     key, count, store_pos: per n-gram context, its rank-1 continuation
    ngram_rank2.arrow  the same for the rank-2 continuation (--preset default, a run that proposed
                    it: policy.json's families, before 2026-12-06)
    backoff.arrow   key, token_id, count, total: per backoff context, its pick
    store.arrow     token_id: the train traces' tokens, which n-gram drafts point into
    trees.arrow     the confidence model's tree nodes (--preset default; policy/trees.py)
    chain_trees.arrow  the chain model's (--preset default, a run that fitted one: policy.json's
                    chain_model, since 2026-12-07), which scores the chain families' drafts in
                    the first choice at a position

The tables are Arrow IPC files, one record batch each, uncompressed, so loading memory-maps them;
JSON for the rest. Nothing is pickled: loading a bundle runs no code from it. Keys are the
warehouse's context keys as one residue mod P1 * P2 (keys.py), sorted within each context
length. A bundle is written to a temporary directory and renamed into place (files.atomic_dir),
and read only after every file's size and checksum match its manifest.

Materializing the n-gram drafts instead of pointing into the store would cost draft_len int32s
per context (on the development set, 11.4M contexts: 730 MB, against 9 MB of store and 4 bytes
of pointer each).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError, first_line
from specdraft.live import keys
from specdraft.live.tables import ContextTable, segments_of
from specdraft.policy.draft_trees import AcceptanceCurves
from specdraft.policy.seed import SourceAveragePolicy
from specdraft.policy.trees import NODE_COLUMNS as TREE_COLUMNS
from specdraft.policy.trees import TreeEnsemble
from specdraft.tables import hashing

FORMAT = "specdraft-drafter"
# 2 (2026-12-07): policy.json's autocomplete_text, and a local tokenizer's files in tokenizer/;
# a specdraft that reads version 1 only would draft otherwise from such a bundle, so it refuses it.
# Version 1 bundles still load, and draft as their runs did.
# 3 (2026-12-07): policy.json's chain (the families after whose pick propose chooses again past
# the first token); a specdraft that reads versions up to 2 would draft without it, so it refuses it.
# 4 (2026-12-07): chain_trees.arrow and policy.json's chain_model and chain_baseline (the first
# choice scores the chain families' drafts by the chain model); a specdraft that reads versions up
# to 3 would score them by the model alone, so it refuses it. A bundle without a chain model is
# still written as version 3, which such a specdraft drafts exactly (bundle_version).
FORMAT_VERSION = 4
WITHOUT_CHAIN_MODEL_VERSION = 3
READABLE_VERSIONS = (1, 2, 3, 4)
MANIFEST = "manifest.json"
PRESETS = ("seed", "default")
# file -> its columns, in order; integer widths of the lookup tables are chosen per bundle (the
# narrowest that fits)
TABLE_COLUMNS = {
    "ngram.arrow": ("key", "count", "store_pos"),
    "ngram_rank2.arrow": ("key", "count", "store_pos"),
    "backoff.arrow": ("key", "token_id", "count", "total"),
    "store.arrow": ("token_id",),
    "trees.arrow": TREE_COLUMNS,
    "chain_trees.arrow": TREE_COLUMNS,
}
TREE_TYPES = {"threshold": pa.float64(), "value": pa.float64(), "left_codes": pa.int64()}  # others int32
PRESET_TABLES = {
    "seed": ("ngram.arrow", "backoff.arrow", "store.arrow"),
    "default": ("ngram.arrow", "backoff.arrow", "store.arrow", "trees.arrow"),
}
RANK2_TABLE = "ngram_rank2.arrow"  # --preset default, where the run proposed ngram-rank2 (proposed_families)
CHAIN_TREES_TABLE = "chain_trees.arrow"  # --preset default, where the run fitted a chain model
TREE_TABLES = ("trees.arrow", CHAIN_TREES_TABLE)
JSON_FILES = ("config.json", "policy.json")
# A tokenizer loaded from a local directory travels in the bundle (its save_pretrained files, in
# the manifest's files with their checksums), so that the bundle loads on another machine, or from
# another folder, than the run's; one named by a model id (the offline Qwen ones, the hub's) is
# loaded by that name.
TOKENIZER_DIR = "tokenizer"


# -- export -------------------------------------------------------------------------------------

def export_bundle(warehouse: Path, run_id: str | None, out: Path) -> dict:
    """Write the bundle of a recorded run (default: the latest) to `out`; returns its manifest."""
    from specdraft.drafters.ngram_paths import build_ngram_choices
    from specdraft.report.results import load_run
    from specdraft.sources.tokenizer import load_tokenizer
    from specdraft.tables.ngrams import rank_continuations_here, ranks_every_context
    from specdraft.warehouse.connection import Warehouse

    results = load_run(Path(warehouse), run_id)
    run_id = results["run_id"]
    preset = results.get("preset")
    cfg = RunConfig.recorded(results["config"])

    tokenizer_fp = results["tokenizer"]["fingerprint"]
    tokenizer = load_tokenizer(cfg.tokenizer)
    if tokenizer.fingerprint != tokenizer_fp:
        raise SpecdraftError(f"run {run_id} was tokenized with {cfg.tokenizer} fingerprint {tokenizer_fp}; "
                             f"the tokenizer loaded under that name here has {tokenizer.fingerprint}")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise SpecdraftError(f"{out}: exists and is not a drafter bundle; choose another --out")
    # how the run chose its n-gram drafts (ngram_choices.sql; runs recorded before the choice by
    # support drafted the most frequent continuation)
    by_support = (results.get("policy") or {}).get("ngram_choice") == "support"
    with Warehouse(Path(warehouse), read_only=True, dataset=results["dataset"], memory_limit=None) as wh:
        check_tables_are_the_runs(wh, results)
        if not ranks_every_context(wh):  # a live prompt may hit any context: rank them all
            # (the two most frequent, or as many as the choice by support reads)
            rank_continuations_here(wh, cfg, top_k=cfg.max_continuations_per_context if by_support else 2)
        build_ngram_choices(wh, cfg, by_support, temp=True)  # over every context, read instead of the run's
        store, starts = _store(wh)
        lookups = {"ngram.arrow": _ngram(wh, len(store), cfg.draft_len, rank=1), "backoff.arrow": _backoff(wh, cfg)}
        tables = {"store.arrow": pa.table({"token_id": store})}
        if preset == "default":
            if "ngram-rank2" in proposed_families(results["policy"]):
                lookups[RANK2_TABLE] = _ngram(wh, len(store), cfg.draft_len, rank=2)
            tables["trees.arrow"] = recorded_trees(wh, run_id)
            if results["policy"].get("chain_model"):
                tables[CHAIN_TREES_TABLE] = recorded_trees(wh, run_id, chain=True)
    segments = {}
    for name, (ctx_lens, table) in lookups.items():
        tables[name] = table
        segments[name] = segments_of(ctx_lens)
    manifest = {
        "format": FORMAT,
        "format_version": bundle_version(cfg, CHAIN_TREES_TABLE in tables),
        "run_id": run_id,
        "dataset": results["dataset"],
        "preset": results["preset"],
        "draft_len": cfg.draft_len,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tokenizer": {"name": cfg.tokenizer, "fingerprint": tokenizer_fp, "vocab_size": tokenizer.vocab_size},
        "hash": {"p1": hashing.P1, "p2": hashing.P2, "b1": hashing.B1, "b2": hashing.B2},
        "tables": {name: {"rows": table.num_rows, "segments": segments.get(name, [])}
                   for name, table in tables.items()},
        "train_traces": len(starts),
        "files": {},
    }
    from specdraft.files import atomic_dir

    with atomic_dir(out) as partial:
        for name, table in tables.items():
            with pa.OSFile(str(partial / name), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=max(table.num_rows, 1))
        (partial / "config.json").write_text(json.dumps(bundle_settings(cfg), indent=2, sort_keys=True) + "\n")
        policy = {**results["policy"], "kind": preset}
        (partial / "policy.json").write_text(json.dumps(policy, indent=2, sort_keys=True) + "\n")
        bundled = []
        if os.path.isdir(cfg.tokenizer) and hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(partial / TOKENIZER_DIR)
            bundled = sorted(f"{TOKENIZER_DIR}/{path.name}" for path in (partial / TOKENIZER_DIR).iterdir())
            manifest["tokenizer"]["bundled"] = TOKENIZER_DIR
        for name in (*tables, *JSON_FILES, *bundled):
            manifest["files"][name] = {"bytes": (partial / name).stat().st_size, "sha256": _sha256(partial / name)}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def check_tables_are_the_runs(wh, results: dict) -> None:
    """The warehouse still holds the tables the run used, not a later build's (for other
    settings, data or code)."""
    from specdraft.pipeline import stale_stages

    stale = stale_stages(wh, results)
    stats = {split: traces for split, traces, *_ in wh.query("tables/trace_stats").fetchall()}
    counts = {split: results.get(f"{split}_examples") for split in ("train", "calibration", "eval")}
    if stale or any(stats.get(split, 0) != n for split, n in counts.items()):
        raise SpecdraftError(
            f"run {results['run_id']}: the warehouse's tables were rebuilt since (for other settings or "
            f"data: {', '.join(stale) or 'trace counts differ'}); rerun it (`specdraft run` with its settings) first"
        )


def _store(wh) -> tuple[np.ndarray, np.ndarray]:
    rows = wh.query("live/bundle_store").to_arrow_table()
    tokens = rows.column("tokens").combine_chunks()
    store = tokens.flatten().to_numpy(zero_copy_only=False).astype(np.int32)
    starts = rows.column("store_start").to_numpy()
    lengths = tokens.value_lengths().to_numpy(zero_copy_only=False)
    if len(starts) and int(starts[-1] + lengths[-1]) != len(store):
        raise SpecdraftError("live/bundle_store.sql: store offsets do not add up to the train tokens")
    return store, starts


def _sorted(rows: pa.Table, values: tuple[str, ...]) -> tuple[np.ndarray, pa.Table]:
    """Live keys, the rows sorted by (ctx_len, key), the narrowest integer column types."""
    ctx_lens = rows.column("ctx_len").to_numpy()
    live = keys.live_keys(rows.column("ctx_hash").to_numpy())
    order = hashing.length_key_order(ctx_lens, live)
    columns = {"key": live[order]}
    for name in values:
        columns[name] = _narrow(rows.column(name).to_numpy()[order])
    return ctx_lens[order], pa.table(columns)


def _narrow(values: np.ndarray) -> np.ndarray:
    """int32 if every value fits, else int64.

    >>> _narrow(np.array([1, 2**31 - 1])).dtype, _narrow(np.array([2**31])).dtype
    (dtype('int32'), dtype('int64'))
    """
    info = np.iinfo(np.int32)
    if not len(values) or (values.min() >= info.min and values.max() <= info.max):
        return values.astype(np.int32)
    return values.astype(np.int64)


def _ngram(wh, store_len: int, draft_len: int, rank: int) -> tuple[np.ndarray, pa.Table]:
    ctx_lens, table = _sorted(wh.query("live/bundle_ngram", {"rank": rank}).to_arrow_table(), ("count", "store_pos"))
    ends = table.column("store_pos").to_numpy() + draft_len
    if len(ends) and int(ends.max()) > store_len:
        raise SpecdraftError("live/bundle_ngram.sql: a continuation points past the token store")
    return ctx_lens, table


def recorded_trees(wh, run_id: str, chain: bool = False) -> pa.Table:
    """The run's recorded confidence model (chain: its chain model); the scorer built from it is
    checked at load."""
    recorded = "policy_chain_trees" if chain else "policy_trees"
    query = "live/bundle_chain_trees" if chain else "live/bundle_trees"
    table = wh.query(query, {"run_id": run_id}).to_arrow_table() if wh.has_table(recorded) else None
    if table is None or table.num_rows == 0:
        if chain:
            raise SpecdraftError(f"run {run_id} recorded no chain model ({recorded}), which its policy says it fitted")
        raise SpecdraftError(f"run {run_id} recorded no confidence model (policy_trees): it predates "
                             "exporting --preset default runs, or its calibration had nothing to learn; rerun it")
    return table.cast(_tree_schema())


def _tree_schema() -> pa.Schema:
    return pa.schema([(name, TREE_TYPES.get(name, pa.int32())) for name in TREE_COLUMNS])


def _backoff(wh, cfg: RunConfig) -> tuple[np.ndarray, pa.Table]:
    rows = wh.query("live/bundle_backoff", {"backoff_lengths": list(cfg.effective_backoff_lengths)})
    return _sorted(rows.to_arrow_table(), ("token_id", "count", "total"))


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def proposed_families(policy: dict) -> tuple[str, ...]:
    """The families whose drafts a --preset default run proposed (its features count them all, so
    its bundle drafts them all: ngram-rank2 from RANK2_TABLE). Runs record them; those before the
    record proposed every one."""
    return tuple(str(name) for name in policy.get("families", families.NAMES))


# -- load ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConfidenceChoice:
    """--preset default's policy, live: the families it may choose, and the trees scoring each
    draft (the first highest raw prediction wins, as in policy/evaluate.py)."""

    choices: tuple[str, ...]
    features: tuple[str, ...]  # the trees' input columns, in order (policy/confidence.py)
    trees: TreeEnsemble
    curves: AcceptanceCurves | None = None  # the token trees' chances (policy/draft_trees.py)
    # the families whose drafts branch token trees and multi-draft proposals: the choices and
    # evidence drafts (families.IN_TREES); a bundle of a run before them: the choices
    scored: tuple[str, ...] = ()
    # each distinct draft at a position scored once, from its scorer's features
    # (confidence.scoring_rows); a bundle of a run before that scores every draft
    per_draft: bool = False
    # the families whose drafts the run proposed (proposed_families)
    proposed: tuple[str, ...] = families.NAMES
    # prompt autocomplete's text read from the tokens alone (policy.Policy.text_from_tokens); a
    # bundle of a run before 2026-12-07 reads the prompt's text if given and the line chunk by
    # chunk, as that run did
    text_from_tokens: bool = False
    # the families after whose pick propose chooses again past the first token
    # (ConfidencePolicy.chain); a bundle of a run before 2026-12-07: none
    chain: tuple[str, ...] = ()
    # the trees scoring those families' drafts in the first choice at a position
    # (ConfidencePolicy.chain_model); a bundle of a run before it: none (the trees above score them)
    chain_trees: TreeEnsemble | None = None


@dataclass(frozen=True)
class Bundle:
    """A loaded bundle: memory-mapped tables, immutable."""

    root: Path
    manifest: dict
    config: RunConfig
    policy: SourceAveragePolicy | ConfidenceChoice
    ngram: ContextTable
    ngram_count: memoryview
    ngram_store_pos: memoryview
    backoff: ContextTable
    backoff_token: memoryview
    backoff_count: memoryview
    backoff_total: memoryview
    store: memoryview
    # --preset default, a run that proposed ngram-rank2 only
    ngram_rank2: ContextTable | None = None
    ngram_rank2_count: memoryview | None = None
    ngram_rank2_store_pos: memoryview | None = None

    @property
    def size_bytes(self) -> int:
        return sum(f["bytes"] for f in self.manifest["files"].values()) + (self.root / MANIFEST).stat().st_size


def read_bundle(root: Path) -> Bundle:
    """Check and open a bundle: format version, every file's size and sha256, the table columns.
    Anything wrong is one line naming the file."""
    root = Path(root)
    manifest = read_manifest(root)
    for name, expected in manifest["files"].items():
        path = root / name
        if not path.is_file():
            raise SpecdraftError(f"{path}: missing from the bundle")
        size = path.stat().st_size
        if size != expected["bytes"]:
            raise SpecdraftError(f"{path}: {size} bytes, the manifest says {expected['bytes']} (truncated or replaced)")
    # the big tables hash in parallel (hashlib releases the GIL), largest first
    names = sorted(manifest["files"], key=lambda name: -manifest["files"][name]["bytes"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = dict(zip(names, pool.map(lambda name: _sha256(root / name), names)))
    for name in names:
        if digests[name] != manifest["files"][name]["sha256"]:
            raise SpecdraftError(f"{root / name}: checksum does not match the manifest (the file is corrupted)")
    preset = manifest["preset"]
    missing = [name for name in (*PRESET_TABLES[preset], *JSON_FILES) if name not in manifest["files"]]
    if missing:
        raise SpecdraftError(f"{root / MANIFEST}: lists no {', '.join(missing)}")
    recorded = _read_json(root / "config.json")
    if not isinstance(recorded, dict):
        raise SpecdraftError(f"{root / 'config.json'}: not a run's settings (a JSON object)")
    config = recorded_config(root / "config.json", recorded, manifest)
    columns = {name: _read_table(root / name) for name in PRESET_TABLES[preset]}
    chain_trees = _read_table(root / CHAIN_TREES_TABLE) if CHAIN_TREES_TABLE in manifest["files"] else None
    policy = _read_policy(root / "policy.json", preset, columns.get("trees.arrow"), root, chain_trees)
    rank2 = isinstance(policy, ConfidenceChoice) and "ngram-rank2" in policy.proposed
    if rank2:
        if RANK2_TABLE not in manifest["files"]:
            raise SpecdraftError(f"{root / MANIFEST}: lists no {RANK2_TABLE}, which the run's policy drafts from")
        columns[RANK2_TABLE] = _read_table(root / RANK2_TABLE)

    def lookup(name: str) -> ContextTable:
        keys = columns[name]["key"]
        return ContextTable(keys, checked_segments(root / MANIFEST, name, manifest["tables"].get(name), keys))

    ngram, backoff = columns["ngram.arrow"], columns["backoff.arrow"]
    extra = {}
    if rank2:
        table = columns[RANK2_TABLE]
        extra = {"ngram_rank2": lookup(RANK2_TABLE), "ngram_rank2_count": memoryview(table["count"]),
                 "ngram_rank2_store_pos": memoryview(table["store_pos"])}
    return Bundle(
        root, manifest, config, policy,
        ngram=lookup("ngram.arrow"),
        ngram_count=memoryview(ngram["count"]),
        ngram_store_pos=memoryview(ngram["store_pos"]),
        backoff=lookup("backoff.arrow"),
        backoff_token=memoryview(backoff["token_id"]),
        backoff_count=memoryview(backoff["count"]),
        backoff_total=memoryview(backoff["total"]),
        store=memoryview(columns["store.arrow"]["token_id"]),
        **extra,
    )


# Settings a bundle's config.json leaves out at these values, which are what a specdraft from
# before them reads in their absence: a bundle without a chain model stays readable by one that
# reads format version 3 (it refuses settings it does not know).
UNSET_SETTINGS = {"chain_model": False, "calibration_stride": None, "calibration_max_positions": None}


def bundle_version(cfg: RunConfig, chain_trees: bool) -> int:
    """The format version a bundle is written as: WITHOUT_CHAIN_MODEL_VERSION where a reader of it
    drafts exactly, so without chain trees and with no setting in config.json it would not know
    (a --chain-model run whose chain fit found nothing to learn has no chain trees, but its
    config.json names chain_model, which such a reader refuses); else FORMAT_VERSION.

    >>> bundle_version(RunConfig(), False), bundle_version(RunConfig(chain_model=True), False)
    (3, 4)
    """
    if chain_trees or set(UNSET_SETTINGS) & set(bundle_settings(cfg)):
        return FORMAT_VERSION
    return WITHOUT_CHAIN_MODEL_VERSION


def bundle_settings(cfg: RunConfig) -> dict:
    """The run's settings as config.json holds them (UNSET_SETTINGS left out at their values).

    >>> sorted(set(RunConfig().to_dict()) - set(bundle_settings(RunConfig())))
    ['calibration_max_positions', 'calibration_stride', 'chain_model']
    """
    return {name: value for name, value in cfg.to_dict().items()
            if not (name in UNSET_SETTINGS and value == UNSET_SETTINGS[name])}


def recorded_config(path: Path, recorded: dict, manifest: dict) -> RunConfig:
    """The run's settings from config.json, checked against the manifest: the preset and draft
    length the bundle was exported with (a config.json that names others, or none, would draft
    other tokens than the run measured, without an error)."""
    try:
        config = RunConfig.recorded(recorded)
    except TypeError as exc:  # a setting this specdraft does not know (a newer one's bundle?)
        raise SpecdraftError(f"{path}: not a run's settings ({first_line(exc)}; exported by a newer "
                             "specdraft?)") from exc
    except (SpecdraftError, ValueError) as exc:
        raise SpecdraftError(f"{path}: not a run's settings ({first_line(exc)})") from exc
    for key in ("preset", "draft_len"):
        if key not in recorded or (key in manifest and recorded[key] != manifest[key]):
            raise SpecdraftError(f"{path}: {key} {recorded.get(key)!r}, but the manifest says "
                                 f"{manifest.get(key)!r} (the bundle was edited)")
    return config


def checked_segments(manifest_path: Path, name: str, entry, keys) -> list[tuple[int, int, int]]:
    """A lookup table's (ctx_len, start, stop) segments as the manifest gives them, checked against
    the table: runs of rising context lengths that cover its rows from the first to the last, each
    run's keys sorted. The table's checksum does not cover them: wrong ones would find other rows,
    and so draft other tokens, without an error."""
    rows = len(keys)
    segments = entry.get("segments") if isinstance(entry, dict) else None
    where = f"{manifest_path}: tables[{name!r}]"
    if not isinstance(segments, list) or entry.get("rows") != rows:
        raise SpecdraftError(f"{where} does not describe the table's {rows} rows")
    at, last_len, checked = 0, 0, []
    for segment in segments:
        if not (isinstance(segment, list) and len(segment) == 3 and all(type(v) is int for v in segment)):
            raise SpecdraftError(f"{where}: segment {segment!r} is not [ctx_len, start, stop]")
        ctx_len, start, stop = segment
        if ctx_len <= last_len or start != at or stop <= start or stop > rows:
            raise SpecdraftError(f"{where}: segment {segment!r} does not follow on (row {at}, context length "
                                 f"above {last_len}, at most {rows} rows)")
        run = np.asarray(keys[start:stop])
        if not np.all(run[1:] >= run[:-1]):
            raise SpecdraftError(f"{where}: the keys of segment {segment!r} are not sorted")
        checked.append((ctx_len, start, stop))
        at, last_len = stop, ctx_len
    if at != rows:
        raise SpecdraftError(f"{where}: the segments end at row {at} of {rows}")
    return checked


def read_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise SpecdraftError(f"{path}: no such file; {root} is not a drafter bundle (`specdraft export` writes one)")
    manifest = _read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SpecdraftError(f"{path}: not a specdraft drafter bundle manifest")
    version = manifest.get("format_version")
    if version not in READABLE_VERSIONS:
        raise SpecdraftError(f"{path}: bundle format version {version!r}; this specdraft reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))} (export the run again)")
    expected = {"p1": hashing.P1, "p2": hashing.P2, "b1": hashing.B1, "b2": hashing.B2}
    if manifest.get("hash") != expected:
        raise SpecdraftError(f"{path}: the bundle's context keys use other hash constants than this specdraft")
    files, tables, tokenizer = manifest.get("files"), manifest.get("tables"), manifest.get("tokenizer")
    if not (isinstance(files, dict) and all(isinstance(f, dict) and {"bytes", "sha256"} <= set(f) for f in files.values())
            and isinstance(tables, dict) and isinstance(tokenizer, dict) and isinstance(manifest.get("run_id"), str)
            and {"name", "fingerprint", "vocab_size"} <= set(tokenizer)):
        raise SpecdraftError(f"{path}: incomplete manifest (files, tables, tokenizer or run_id missing)")
    wrong = [f"files[{name!r}]" for name, f in files.items()
             if not (_integer(f["bytes"]) and isinstance(f["sha256"], str))]
    wrong += [f"tokenizer.{key}" for key, is_type in (("vocab_size", _integer), ("fingerprint", _string),
                                                      ("name", _string)) if not is_type(tokenizer[key])]
    wrong += [key for key in ("draft_len",) if key in manifest and not _integer(manifest[key])]
    if wrong:
        raise SpecdraftError(f"{path}: {', '.join(wrong)} of the wrong type (sizes and counts are integers, "
                             "names and checksums strings)")
    # every file the bundle lists, and the tokenizer it carries, are inside it
    outside = [name for name in (*files, tokenizer.get("bundled") or TOKENIZER_DIR) if not _inside(name)]
    if outside:
        raise SpecdraftError(f"{path}: names {', '.join(map(repr, outside))}, not a path inside the bundle")
    if manifest.get("preset") not in PRESETS:
        raise SpecdraftError(f"{path}: a --preset {manifest.get('preset')} bundle; this specdraft reads "
                             f"{' and '.join(PRESETS)} bundles")
    return manifest


def _integer(value) -> bool:
    return type(value) is int


def _string(value) -> bool:
    return isinstance(value, str)


def _inside(name) -> bool:
    """Is a manifest's file name a relative path below the bundle's directory (store.arrow,
    tokenizer/vocab.json), with no way out of it?

    >>> [_inside(n) for n in ("store.arrow", "tokenizer/vocab.json", "../store.arrow", "/etc/passwd", "")]
    [True, True, False, False, False]
    """
    if not isinstance(name, str) or not name or "\\" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and all(part not in ("", ".", "..") for part in name.split("/"))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecdraftError(f"{path}: unreadable ({first_line(exc)})") from exc


def _read_policy(path: Path, preset: str, trees: dict | None, root: Path, chain_trees: dict | None = None):
    """policy.json's policy; --preset default: with trees.arrow's scorer, and chain_trees.arrow's
    where the run fitted a chain model (policy.json's chain_model)."""
    data = _read_json(path)
    try:
        if data["kind"] != preset:
            raise SpecdraftError(f"{path}: a {data['kind']!r} policy in a --preset {preset} bundle")
        if preset == "default":
            ensemble = _ensemble(trees, float(data["baseline"]), len(data["features"]), root / "trees.arrow")
            chain_model = None
            if data.get("chain_model"):
                if chain_trees is None:
                    raise SpecdraftError(f"{root / MANIFEST}: lists no {CHAIN_TREES_TABLE}, which the run's policy "
                                         "scores with")
                chain_model = _ensemble(chain_trees, float(data["chain_baseline"]), len(data["features"]),
                                        root / CHAIN_TREES_TABLE)
            curves = data.get("acceptance_curves")  # None: a bundle of a run before token trees
            choices = tuple(str(c) for c in data["choices"])
            chain = tuple(str(c) for c in data.get("chain", ()))
            unknown = [name for name in (*choices, *data.get("scored", ()), *chain) if name not in families.ORDER]
            if unknown:
                raise SpecdraftError(f"{path}: draft families {', '.join(map(repr, unknown))} are not "
                                     f"this specdraft's ({', '.join(families.NAMES)})")
            return ConfidenceChoice(choices, tuple(data["features"]), ensemble,
                                    None if curves is None else AcceptanceCurves.from_dict(curves),
                                    tuple(str(c) for c in data.get("scored", choices)),
                                    data.get("scoring") == "per-draft", proposed_families(data),
                                    data.get("autocomplete_text") == "tokens", chain, chain_model)
        return SourceAveragePolicy.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecdraftError(f"{path}: not a {preset} policy ({type(exc).__name__}: {first_line(exc)})") from exc


def _ensemble(trees: dict[str, np.ndarray], baseline: float, features: int, path: Path) -> TreeEnsemble:
    """A tree table's scorer (policy/trees.py); what is wrong with it, one line naming the file."""
    nodes = pa.table({name: trees[name] for name in TREE_COLUMNS})
    try:
        return TreeEnsemble(baseline, nodes, features)
    except SpecdraftError as exc:
        raise SpecdraftError(f"{path}: {exc}") from exc


def _read_table(path: Path) -> dict[str, np.ndarray]:
    """The columns of a one-batch Arrow IPC file, as numpy arrays over the memory map."""
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        if reader.num_record_batches != 1:
            raise ValueError(f"{reader.num_record_batches} record batches, expected 1")
        batch = reader.get_batch(0)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise SpecdraftError(f"{path}: not a readable Arrow IPC table ({first_line(exc)})") from exc
    expected = TABLE_COLUMNS[path.name]
    schema = batch.schema
    if path.name in TREE_TABLES:
        wrong = schema != _tree_schema()
        types = "tree node columns of policy/trees.py"
    else:
        wrong = tuple(schema.names) != expected or any(
            t not in (pa.int32(), pa.int64()) or (name == "key" and t != pa.int64())
            for name, t in zip(schema.names, schema.types)
        )
        types = "int64 key, int32 or int64 values"
    if wrong or any(column.null_count for column in batch.columns):
        raise SpecdraftError(f"{path}: columns {[f'{f.name} {f.type}' for f in schema]}, expected "
                             f"{', '.join(expected)} ({types}, no nulls)")
    names = schema.names
    return {name: batch.column(name).to_numpy(zero_copy_only=True) for name in names}
