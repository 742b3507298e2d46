"""Stage 5: every source's draft at every query position, and how much of it is accepted.

    query_positions -> prompt_candidates (Python text rules, autocomplete.py; in a thread beside
                                          the SQL and the walk)
                    -> arithmetic_candidates (Python: the calculation just written out,
                                          arithmetic.py; --preset default)
                    -> token_windows     (SQL: the tokens after and before every position)
                    -> context_occurrences (SQL: window over context keys of the same trace)
                    -> backoff_candidates (greedy walk: numpy keys + searches in its picks,
                                          backoff_walk.py; in a thread beside the n-gram choices)
                    -> copy_candidates   (SQL: over context_occurrences)
                    -> ngram_choices     (SQL: each context's two continuations to draft; by
                                          support under --preset default, ngram_paths.py)
                    -> ngram_candidates  (SQL: join with ngram_choices)
                    -> recent_copy_candidates, ngram_all_candidates (beyond the seed; views,
                                          read once, by candidates)
                    -> online_candidates (the online scenario, --online)
                    -> candidates        (SQL: union, accepted prefix length)
                    -> candidate_features (what the confidence policy sees; --preset default)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.drafters.arithmetic import Arithmetic
from specdraft.drafters.autocomplete import PromptAutocomplete
from specdraft.drafters.backoff_walk import BackoffWalk, backoff_windows
from specdraft.drafters.ngram_paths import build_ngram_choices
from specdraft.policy import policy_for
from specdraft.policy.confidence import UNSEEN_DISTANCE
from specdraft.progress import progress
from specdraft.sources.tokenizer import Tokenizer
from specdraft.warehouse.connection import Warehouse, release_unused_memory

FEATURE_PARTS = 2  # runs of traces candidate_features is built in (query_trace_parts.sql)
# Sources kept as views, which the candidates table reads (its family column names their rows):
# written out as tables first, their 1.27M drafts on the development set made the candidates stage
# take 8.30-8.63 s against 7.85-8.15 s.
# Each is there when the preset proposes its family; a parameter named beside it says whether the
# preset proposes another family the view drafts too.
VIEWED_SOURCES = (("recent_copy_candidates", "recent-copy", {}),
                  ("ngram_all_candidates", "ngram-all", {"rank2": "ngram-rank2"}))
# The drafts' tokens are stored as they are (Warehouse.materialize's compression): DuckDB bitpacked
# them to about half. On one development-set warehouse the candidates statement took 1.94 s against
# 2.16 s (--preset default) and 0.85 s against 0.94 s (--preset seed), medians of 6 alternated
# runs; in whole runs 1.68-1.89 s against 1.77-2.26 s; the warehouse file 377 MB against 333 MB.
CANDIDATES_COMPRESSION = {"draft": "uncompressed"}
# The room copy_candidates and ngram_candidates need as views (_sources_as_views): 136MB for the
# tests' parity fixture (2,126 query positions), which with views failed at DuckDB limits of 35MB
# (--preset seed) and 70MB (default) and ran at 49MB and 84MB; 556MB for the development set
# (106,963), which failed at 84MB and ran at 175MB (--preset seed). The failures are out-of-memory
# errors in the candidates statement, where with the tables DuckDB spills and finishes.
VIEW_ROOM_FIXED = 128 * 1000**2
VIEW_ROOM_PER_POSITION = 4000


def build_query_positions(wh: Warehouse, cfg: RunConfig) -> None:
    """The calibration and eval positions the sources draft at (query_positions)."""
    stride, most = cfg.calibration_sample
    wh.materialize("drafters/query_positions", {"stride": stride, "calibration_max_positions": most})


def build_query_windows(wh: Warehouse, cfg: RunConfig) -> None:
    """The tokens around every query position (token_windows), which the candidates and the copy
    sources read instead of slicing a trace's whole token list per row, and where each position's
    contexts occurred earlier in its trace (context_occurrences), which both copy sources read.
    Both kept: the copy sources' views read them."""
    wh.materialize("drafters/token_windows", {"draft_len": cfg.draft_len})
    wh.materialize("drafters/context_occurrences", {"draft_len": cfg.draft_len})


def prompt_candidates(traces: list[tuple], tokenizer: Tokenizer, cfg: RunConfig,
                      text_from_tokens: bool = False) -> pa.Table:
    """Prompt autocomplete's drafts at the query positions of query_traces.sql's rows: Python text
    work, which touches no connection (build_candidates runs it beside the SQL sources).
    text_from_tokens: the policy's (policy.Policy): the prompt's text is the decode of its tokens,
    and the current line is decoded whole."""
    rows = []
    for trace_id, _split, prompt_len, tokens, prompt, completion_positions in progress(
        traces, desc="prompt autocomplete", unit="trace"
    ):
        drafter = PromptAutocomplete(tokenizer, prompt, tokens, prompt_len, cfg.draft_len, text_from_tokens)
        for cpos, proposal in drafter.walk(completion_positions):
            if proposal is not None:
                draft, score = proposal
                rows.append((trace_id, prompt_len + cpos, draft, score))
    return _drafts_table("prompt-autocomplete", rows)


def arithmetic_candidates(traces: list[tuple], tokenizer: Tokenizer, cfg: RunConfig, enabled: bool) -> pa.Table:
    """Arithmetic drafts (arithmetic.py) at the query positions of query_traces.sql's rows (none
    unless `enabled`); like prompt autocomplete, Python that touches no connection."""
    rows = []
    if not enabled:
        return _drafts_table("arithmetic", rows)
    drafter = Arithmetic(tokenizer, cfg.draft_len)
    for trace_id, _split, prompt_len, tokens, _prompt, completion_positions in traces:
        for pos, draft in drafter.propose_at(tokens, [prompt_len + cpos for cpos in completion_positions]):
            rows.append((trace_id, pos, draft, 0.0))
    return _drafts_table("arithmetic", rows)


def _drafts_table(family: str, rows: list[tuple]) -> pa.Table:
    """A text source's drafts, (trace_id, pos, draft, score) rows, in candidates.sql's columns."""
    n = len(rows)
    trace_ids, positions, drafts, scores = zip(*rows) if rows else ((), (), (), ())
    return pa.table(
        {
            "trace_id": pa.array(trace_ids, pa.int64()),
            "pos": pa.array(positions, pa.int64()),
            "family": pa.array([family] * n, pa.string()),
            "source": pa.array([family] * n, pa.string()),
            "ctx_len": pa.nulls(n, pa.int32()),
            "count": pa.nulls(n, pa.int64()),
            "score": pa.array(scores, pa.float64()),
            "draft": pa.array([list(draft) for draft in drafts], pa.list_(pa.int32())),
        }
    )


def build_candidates(wh: Warehouse, cfg: RunConfig, tokenizer: Tokenizer, traces_path: Path) -> None:
    build_query_positions(wh, cfg)
    policy = policy_for(cfg.preset)
    # Prompt autocomplete (then arithmetic), Python over text, runs beside the SQL sources'
    # statements, and the backoff walk (numpy, which lets go of the GIL, once its picks are read
    # here) beside the n-gram choices, where there is room for it (BackoffWalk.beside). On the
    # development set the stage took 6.9 s with the first in turn. Started before the SQL sources'
    # statements, the walk held its picks while they ran: the stage peaked at 1.04 GiB against 0.97
    # GiB (--preset default, sampled in process), and `specdraft bench` saw the seed preset's run
    # peak at 0.94 GiB against 0.86 GiB. Its picks are read first and alone: a read on the cursor
    # while this connection's statement was done (release_cached_memory lowers DuckDB's memory
    # limit for a moment) aborted the stage's transaction.
    with wh.outside_transaction() as lookups, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="backoff-walk") as walker, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-autocomplete") as beside:
        traces = wh.query("drafters/query_traces", {"traces_path": str(traces_path)}).fetchall()
        prompt = beside.submit(prompt_candidates, traces, tokenizer, cfg, policy.text_from_tokens)
        arithmetic = beside.submit(arithmetic_candidates, traces, tokenizer, cfg, "arithmetic" in policy.families)
        del traces
        build_query_windows(wh, cfg)
        walk = BackoffWalk.prepare(wh, lookups, cfg, backoff_windows(wh))
        backoff = walker.submit(walk.run) if walk.beside else None  # (else in turn, after the SQL)
        build_ngram_choices(wh, cfg, policy.ngram_by_support)
        as_view = _sources_as_views(wh)
        _source(wh, "copy_candidates", {"copy_context_lengths": list(cfg.copy_context_lengths)}, as_view)
        _source(wh, "ngram_candidates", {"context_lengths": list(cfg.context_lengths), "draft_len": cfg.draft_len},
                as_view)
        wh.store("backoff_candidates", backoff.result() if backoff else walk.run())
        wh.store("prompt_candidates", prompt.result())
        wh.store("arithmetic_candidates", arithmetic.result())
        del walk, backoff, prompt, arithmetic  # (the futures hold their tables)
    release_unused_memory()  # the walk's freed arrays, kept by its threads' heaps, before the SQL
    for table, family, more in VIEWED_SOURCES:
        proposes = {param: name in policy.families for param, name in more.items()}
        _source(wh, table, {"enabled": family in policy.families, "draft_len": cfg.draft_len, **proposes},
                as_view=True)
    wh.materialize("drafters/online_candidates",
                   {"enabled": cfg.online and "online" in policy.families, "draft_len": cfg.draft_len})
    wh.register("source_families", families.order_table())
    wh.materialize("drafters/candidates", compression=CANDIDATES_COMPRESSION)
    if policy.reads_features:
        build_candidate_features(wh)


def _sources_as_views(wh: Warehouse) -> bool:
    """Are copy_candidates and ngram_candidates views (computed inside the candidates statement),
    or tables written first? Views save the writing (development set, --preset seed: candidates
    stage 3.84-4.07 s against 4.69-4.82 s), but inside the one statement their work leaves DuckDB
    less to spill with: there they need about VIEW_ROOM_FIXED plus VIEW_ROOM_PER_POSITION bytes per
    query position of DuckDB's limit, and tables are used below that."""
    limit = wh.duckdb_limit_bytes()
    return limit is None or limit >= VIEW_ROOM_FIXED + VIEW_ROOM_PER_POSITION * wh.row_count("query_positions")


def _source(wh: Warehouse, table: str, params: dict, as_view: bool) -> None:
    """sql/drafters/<table>.sql as a view kept in the warehouse (as_view) or a table, in place of
    what an earlier build left under that name."""
    kind = wh.table_kind(table)
    if kind == "BASE TABLE" and as_view:
        wh.drop(table)
    elif kind == "VIEW" and not as_view:
        wh.drop_view(table)
    wh.materialize(f"drafters/{table}", params, view=as_view, persistent_view=as_view)


def build_candidate_features(wh: Warehouse) -> None:
    """candidate_features, a run of traces at a time: the development set's candidates stage
    peaked at 0.95-0.96 GiB built in two runs against 1.12-1.16 GiB in one, and took 0.3 s longer."""
    parts = wh.query("drafters/query_trace_parts", {"parts": FEATURE_PARTS}).fetchall() or [(0, 0, 0)]  # (none: empty)
    for part, from_trace_id, to_trace_id in parts:
        wh.materialize("drafters/draft_known_tokens", {"from_trace_id": from_trace_id, "to_trace_id": to_trace_id,
                                                       "unseen_distance": UNSEEN_DISTANCE}, temp=True)
        wh.materialize("drafters/candidate_features", {"from_trace_id": from_trace_id, "to_trace_id": to_trace_id},
                       append=part > 0)
    wh.drop("draft_known_tokens")
