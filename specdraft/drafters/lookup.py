"""`specdraft lookup "TEXT"`: what every source would propose after a piece of text.

The text is tokenized with the dataset's tokenizer and treated as the known prefix. The global
n-gram and backoff sources look up the dataset's tables (the same keys as the pipeline); the copy
sources look inside the text itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from specdraft.config import RunConfig
from specdraft.errors import SpecdraftError
from specdraft.tables.hashing import window_key
from specdraft.tables.ngrams import rank_continuations_here, ranking_settings
from specdraft.warehouse.connection import Warehouse

SHOWN_RANKS = 3  # the n-gram's continuations lookup shows at each length (and the drafted one)


def _probe(wh: Warehouse, tokens: list[int], lengths) -> pa.Table:
    """Register the contexts `tokens` ends in, at each of `lengths`, as lookup_probes; return them."""
    usable = [length for length in lengths if length <= len(tokens)]
    probes = pa.table(
            {
                "ctx_len": pa.array(usable, pa.int32()),
                "ctx_hash": pa.array([window_key(tokens[-length:]) for length in usable], pa.int64()),
            }
        )
    wh.register("lookup_probes", probes)
    return probes


def backoff_walk(wh: Warehouse, tokens: list[int], cfg: RunConfig) -> tuple[list[int], list[int]]:
    """The seed's greedy backoff draft after `tokens` (one table lookup per step)."""
    draft: list[int] = []
    lengths: list[int] = []
    for _ in range(cfg.draft_len):
        _probe(wh, tokens + draft, cfg.effective_backoff_lengths)
        hits = wh.query("drafters/lookup_backoff").fetchall()
        if not hits:
            break
        ctx_len, token_id, _count, _total = hits[0]
        draft.append(token_id)
        lengths.append(ctx_len)
    return draft, lengths


def recent_copy(tokens: list[int], lengths, draft_len: int) -> list[tuple[int, list[int]]]:
    """Latest earlier occurrence of the last ctx_len tokens, repeating the period past the end."""
    out = []
    for length in sorted(lengths, reverse=True):
        if length >= len(tokens):
            continue
        context = tokens[-length:]
        for end in range(len(tokens) - 1, length - 1, -1):
            if tokens[end - length : end] == context:
                period = len(tokens) - end
                out.append((length, [tokens[end + (i % period)] for i in range(draft_len)]))
                break
    return out


def latest_run_config(wh: Warehouse, dataset: str) -> RunConfig:
    """The settings of the dataset's latest run (RunConfig's defaults before any run)."""
    import json

    if not wh.has_table("runs", "main"):
        return RunConfig()
    rows = wh.query("warehouse/dataset_run_config", {"name": dataset}).fetchall()
    return RunConfig.recorded(json.loads(rows[0][0])) if rows else RunConfig()


def drafted_ranks(continuations: pa.Table, cfg: RunConfig) -> dict[int, int]:
    """Per context length, the rank of the continuation cfg's preset drafts from the looked-up
    context's ranked continuations (lookup_continuations rows): its most supported path
    (ngram_paths.py) where the preset chooses by support, else the most frequent."""
    from specdraft.drafters.ngram_paths import Continuations, path_choices
    from specdraft.policy import policy_for

    if not continuations.num_rows:
        return {}
    if not policy_for(cfg.preset).ngram_by_support:
        return {ctx_len: 1 for ctx_len in continuations.column("ctx_len").to_pylist()}
    ordered = continuations.take(pc.sort_indices(continuations, [(c, "ascending") for c in ("ctx_len", "ctx_hash",
                                                                                           "rank")]))
    chosen = path_choices(ordered.select(["ctx_len", "ctx_hash", "rank", "count"]),
                          Continuations.of_lists(ordered.column("draft")))
    return dict(zip(chosen.column("ctx_len").to_pylist(), chosen.column("rank").to_pylist(), strict=True))


def lookup(warehouse: Path, dataset: str, text: str, cfg: RunConfig | None = None) -> list[dict]:
    """Rows of (source, ctx_len, count, draft tokens, draft text). cfg: the settings to look up
    with; by default the dataset's latest run's (RunConfig's defaults before any run). The n-gram's
    rows are each length's top SHOWN_RANKS continuations and the one the preset drafts, marked
    "drafted" (the most frequent under --preset seed, the most supported path under default)."""
    from specdraft.sources.tokenizer import load_tokenizer

    with Warehouse(warehouse, read_only=True, dataset=dataset, memory_limit=None) as wh:
        if not wh.has_table("exact_continuations"):
            raise SpecdraftError(f"dataset {dataset!r} has no n-gram tables yet; build them with "
                                 f"`specdraft build --name {dataset}` (or `specdraft run`)")
        if cfg is None:
            cfg = latest_run_config(wh, dataset)
        tokenizer_name = wh.query("warehouse/dataset_tokenizer", {"name": dataset}).fetchall()[0][0]
        tokenizer = load_tokenizer(tokenizer_name)
        tokens = tokenizer.encode(text)
        rows: list[dict] = []
        for length, draft in recent_copy(tokens, sorted(set(cfg.copy_context_lengths) | set(cfg.context_lengths)),
                                         cfg.draft_len)[:3]:
            rows.append({"source": f"recent-copy:{length}", "ctx_len": length, "count": None, "draft": draft})
        probes = _probe(wh, tokens, cfg.context_lengths)
        built = ranking_settings(wh)
        if built is not None:  # the stored table ranks the eval and calibration contexts only
            wh.register("wanted_contexts", probes)
            ranked = dataclasses.replace(cfg, **built)
            rank_continuations_here(wh, ranked, ranked.max_continuations_per_context, wanted=True)
        continuations = wh.query("drafters/lookup_continuations", {"draft_len": cfg.draft_len}).to_arrow_table()
        drafted = drafted_ranks(continuations, cfg)
        for ctx_len, rank, count, draft in zip(*(continuations.column(c).to_pylist()
                                                 for c in ("ctx_len", "rank", "count", "draft"))):
            if rank <= SHOWN_RANKS or drafted.get(ctx_len) == rank:
                mark = ", drafted" if drafted.get(ctx_len) == rank else ""
                rows.append({"source": f"ngram:{ctx_len} (rank {rank}{mark})", "ctx_len": ctx_len, "count": count,
                             "draft": list(draft)})
        draft, lengths = backoff_walk(wh, tokens, cfg)
        if draft:
            rows.append({"source": f"backoff:{lengths[0]}", "ctx_len": lengths[0], "count": None, "draft": draft})
    for row in rows:
        row["text"] = tokenizer.decode(row["draft"])
    return rows
