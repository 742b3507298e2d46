"""`specdraft replay`: a run's eval traces through the live drafter, as a decoder would call it.

Two walks over every eval trace, each session started with the trace's prompt:

- every position: propose, then extend by the true next token, at each response position; the
  live draft is compared with the run's chosen draft there (eval_positions and candidates), and
  propose and extend are timed;
- decode step: propose, accept the draft's matching prefix, extend by it and the next true token
  (by draft_len tokens after a full draft), as the run's decode-step metric walks;
- cut (--preset default bundles): the decode walk of propose(verify_cost=c) at the run's
  --verify-cost, a + 1 tokens a step, as the run's draft_length "adaptive" row at c walks: its
  tokens drafted and accepted per step and expected speedup, set beside that row's.

Both give accepted tokens per position, set beside the run's results; the bundle's size on disk,
its load time and the process's resident memory once it is loaded are measured too.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.live.drafter import Drafter, chained_draft
from specdraft.measure.timer import current_rss_bytes
from specdraft.policy.draft_length import walk_summary
from specdraft.policy.evaluate import accepted_prefix
from specdraft.report.results import summarize

SHOWN_MISMATCHES = 5


def replay(warehouse: Path, run_id: str | None, bundle: Path) -> dict:
    """Replay a recorded run (default: the latest) through the bundle; the figures as a dict."""
    from specdraft.live.bundle import check_tables_are_the_runs
    from specdraft.report.results import load_run
    from specdraft.warehouse.connection import Warehouse

    rss_before = current_rss_bytes()
    started = time.perf_counter()
    drafter = Drafter.load(bundle)
    load_s = time.perf_counter() - started
    rss_loaded = current_rss_bytes()

    results = load_run(Path(warehouse), run_id)
    if drafter.run_id != results["run_id"]:
        raise SpecdraftError(f"{bundle}: exported from run {drafter.run_id}, not run {results['run_id']}; "
                             "name the bundle's run or export this one")
    with Warehouse(Path(warehouse), read_only=True, dataset=results["dataset"], memory_limit=None) as wh:
        check_tables_are_the_runs(wh, results)
        traces = wh.query("live/replay_traces").to_arrow_table()
        prompt_texts = None
        if not drafter.policy.text_from_tokens:  # the run read the dataset's prompt text
            prompt_texts = _prompt_texts(wh, results["dataset"], traces.column("trace_id").to_pylist())
        chosen = wh.query("live/replay_drafts", {"run_id": results["run_id"]}).to_arrow_table()
        # the choices after a chained token (runs before the chain model recorded none: their own)
        seconds = chosen.column("draft")
        if "second_source" in wh.column_names("eval_positions"):
            seconds = wh.query("live/replay_second_drafts", {"run_id": results["run_id"]}).to_arrow_table().column(
                "second_draft")
        chosen = chosen.append_column("second_draft", seconds)
    prompts = traces.column("prompt_len").to_pylist()
    tokens = traces.column("tokens").to_pylist()
    walk = every_position(drafter, traces.column("trace_id").to_pylist(), prompts, tokens, chosen, prompt_texts)
    drafter.forget()  # an --online run's decode walk starts from an empty store too
    decode = decode_step(drafter, prompts, tokens, prompt_texts)
    draft_len = drafter.draft_len
    live_every, live_decode = summarize(walk["accepted"], draft_len), summarize(decode, draft_len)
    cut = None
    run_lengths = results.get("draft_length")
    if run_lengths and getattr(drafter.policy, "curves", None) is not None:
        cost = run_lengths["chosen"]["verify_cost"]
        drafter.forget()
        cut = _cut_beside(cut_walk(drafter, prompts, tokens, cost, prompt_texts), run_lengths["adaptive"][str(cost)],
                          cost)
    return {
        "run_id": results["run_id"],
        "bundle": str(bundle),
        "bundle_bytes": drafter.bundle.size_bytes,
        "load_s": load_s,
        "rss_bytes": rss_loaded,
        "rss_load_bytes": rss_loaded - rss_before,
        "traces": traces.num_rows,
        "positions": len(walk["accepted"]),
        "exact_positions": walk["exact"],
        "exact_share": walk["exact"] / len(walk["accepted"]) if len(walk["accepted"]) else 1.0,
        "mismatches": walk["mismatches"],
        "every_position": _beside(live_every, results["selected"]),
        "decode_step": _beside(live_decode, results["decode_step"]),
        "cut_decode_step": cut,
        "latency_us": {name: _percentiles(walk[name]) for name in ("start", "propose", "extend")},
    }


def _prompt_texts(wh, dataset: str, trace_ids: list[int]) -> list[str]:
    """The eval traces' prompt text (policy/eval_traces.sql, which the seed preset's decode walk
    reads it from), in trace id order, from the dataset's traces Parquet, which a warehouse copied
    without its traces/ lacks."""
    from specdraft.sources.traces import traces_path

    path = traces_path(wh.traces_dir, dataset)
    if not path.exists():
        raise SpecdraftError(f"{path}: not found; this run's prompt autocomplete read the prompts' text from it, and "
                             "so does its replay")
    texts = wh.query("policy/eval_traces", {"traces_path": str(path)}).to_arrow_table()
    if texts.column("trace_id").to_pylist() != trace_ids:
        raise SpecdraftError(f"{path}: its eval traces are not the warehouse's")
    return texts.column("prompt").to_pylist()


def every_position(drafter: Drafter, trace_ids: list[int], prompts: list[int], tokens: list[list[int]],
                   chosen, prompt_texts: list[str] | None = None) -> dict:
    """Propose and extend by one token at every response position; the live drafts against the
    run's (chosen: replay_drafts rows in trace and position order) and the calls' nanoseconds.
    prompt_texts: each trace's prompt as text (Drafter.start's prompt_text), as the run read it."""
    chosen_trace = chosen.column("trace_id").to_pylist()
    chosen_pos = chosen.column("pos").to_pylist()
    chosen_draft = chosen.column("draft").to_pylist()
    second_draft = chosen.column("second_draft").to_pylist()
    chosen_source = chosen.column("source").to_pylist()
    draft_len = drafter.draft_len
    clock = time.perf_counter_ns
    start_ns, propose_ns, extend_ns, accepted = [], [], [], []
    exact, mismatches, row = 0, [], 0
    for i, (trace_id, prompt_len, trace) in enumerate(zip(trace_ids, prompts, tokens)):
        t0 = clock()
        session = drafter.start(trace[:prompt_len], None if prompt_texts is None else prompt_texts[i])
        start_ns.append(clock() - t0)
        for pos in range(prompt_len, len(trace)):
            t0 = clock()
            draft = session.propose()
            t1 = clock()
            propose_ns.append(t1 - t0)
            if row >= len(chosen_trace) or (chosen_trace[row], chosen_pos[row]) != (trace_id, pos):
                raise SpecdraftError(f"live/replay_drafts.sql: no row for trace {trace_id} position {pos} "
                                     "(the run's eval positions and the eval traces differ)")
            expected = chosen_draft[row] or []
            same = draft == expected
            if expected and families.ORDER.get(chosen_source[row].split(":")[0]) in drafter.chain:
                same = _same_chained(draft, expected, trace[pos], _next_draft(chosen_trace, chosen_pos, second_draft, row), draft_len)
            if same:
                exact += 1
            elif len(mismatches) < SHOWN_MISMATCHES:
                mismatches.append({"trace_id": trace_id, "pos": pos, "live": draft, "run": expected})
            row += 1
            accepted.append(accepted_prefix(draft, trace[pos : pos + draft_len], draft_len))
            next_token = [trace[pos]]
            t0 = clock()
            session.extend(next_token)
            extend_ns.append(clock() - t0)
        session.close()
    if row != len(chosen_trace):
        raise SpecdraftError("live/replay_drafts.sql: more eval positions than the eval traces have")
    return {"accepted": np.array(accepted, dtype=np.int64), "exact": exact, "mismatches": mismatches,
            "start": start_ns, "propose": propose_ns, "extend": extend_ns}


def _next_draft(trace_ids: list[int], positions: list[int], drafts: list, row: int) -> list[int] | None:
    """The run's draft at the position after row's in its trace (drafts: replay_drafts' second
    choices, the choice after a chained token; [] if none), None past the trace's last."""
    if row + 1 < len(trace_ids) and (trace_ids[row + 1], positions[row + 1]) == (trace_ids[row], positions[row] + 1):
        return drafts[row + 1] or []
    return None


def _same_chained(draft: list[int], chosen: list[int], written: int, next_chosen: list[int] | None,
                  draft_len: int) -> bool:
    """Is the live draft the run's where the run's pick (a whole draft_len long) chose again past
    its first token (ConfidencePolicy.chain)? Where the trace wrote that token, the draft is it,
    the run's next choice and the pick's tokens after that; where it did not, or at the trace's
    last position, the run did not make the choice after it, and the live draft must start with the
    token and be as long as the pick (evaluate.chained_acceptance)."""
    if len(chosen) < draft_len:
        return draft == chosen
    if chosen[0] != written or next_chosen is None:
        return len(draft) == len(chosen) and draft[:1] == chosen[:1]
    return draft == chained_draft(chosen, next_chosen, draft_len)


def decode_step(drafter: Drafter, prompts: list[int], tokens: list[list[int]],
                prompt_texts: list[str] | None = None) -> np.ndarray:
    """The decode-step walk through the live API: propose, then extend by the accepted tokens and
    the next one (draft_len after a full draft)."""
    steps = _decode_walk(drafter, prompts, tokens, prompt_texts, lambda session: session.propose(),
                         full_draft_takes_next=False)
    return np.array([accepted for _drafted, accepted in steps], dtype=np.int64)


def cut_walk(drafter: Drafter, prompts: list[int], tokens: list[list[int]], cost: float,
             prompt_texts: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The decode walk of drafts cut at `cost` (propose(verify_cost=cost)), a + 1 tokens a step as
    policy/draft_length.py's walk moves: (drafted, accepted) per step."""
    steps = np.array(list(_decode_walk(drafter, prompts, tokens, prompt_texts,
                                       lambda session: session.propose(verify_cost=cost), full_draft_takes_next=True)),
                     dtype=np.int64).reshape(-1, 2)
    return steps[:, 0], steps[:, 1]


def _decode_walk(drafter: Drafter, prompts: list[int], tokens: list[list[int]], prompt_texts: list[str] | None,
                 propose, full_draft_takes_next: bool):
    """(tokens drafted, tokens accepted) at each decode step of every trace, each session started
    with its prompt: propose(session), then extend by the accepted tokens and the next true one;
    after a full draft (draft_len accepted) the next one too only if full_draft_takes_next."""
    draft_len = drafter.draft_len
    for i, (prompt_len, trace) in enumerate(zip(prompts, tokens)):
        session = drafter.start(trace[:prompt_len], None if prompt_texts is None else prompt_texts[i])
        pos = prompt_len
        while pos < len(trace):
            draft = propose(session)
            accepted = accepted_prefix(draft, trace[pos : pos + draft_len], draft_len)
            yield len(draft), accepted
            step = accepted if accepted == draft_len and not full_draft_takes_next else accepted + 1
            session.extend(trace[pos : pos + step])
            pos += step
        session.close()


def _cut_beside(walk: tuple[np.ndarray, np.ndarray], run: dict, cost: float) -> dict:
    """The live cut walk beside the run's adaptive row at the same cost, both as
    draft_length.walk_summary gives them (the same figures from the same steps)."""
    mine = walk_summary(*walk, (cost,))
    live, recorded = ({"steps": row["steps"], "drafted_per_step": row["drafted_per_step"],
                       "accepted_per_step": row["accepted_per_step"], "speedup": row["speedup"][str(cost)]}
                      for row in (mine, run))
    return {"verify_cost": cost, "live": live, "run": recorded, "equal": live == recorded}


def _beside(live: dict, run: dict) -> dict:
    return {
        "positions": live["positions"],
        "live": live["avg_accepted"],
        "run": run["avg_accepted"],
        "equal": live["histogram"] == run["histogram"] and live["positions"] == run["positions"],
    }


def _percentiles(nanoseconds: list[int]) -> dict:
    if not nanoseconds:
        return {"calls": 0}
    us = np.asarray(nanoseconds, dtype=np.float64) / 1000.0
    p50, p90, p99 = np.percentile(us, [50, 90, 99])
    return {"calls": len(us), "p50": p50, "p90": p90, "p99": p99, "max": float(us.max())}


def format_replay(result: dict) -> str:
    """The replay's figures as a table for stdout."""
    lines = [
        f"run {result['run_id']}, bundle {result['bundle']}: {result['traces']} eval traces",
        (f"live draft = run's chosen draft   {result['exact_positions']:,} of {result['positions']:,} "
         f"positions ({result['exact_share']:.4%})"),
        "",
        f"{'accepted per position':<24}{'positions':>10}{'live':>12}{'run':>12}  equal",
    ]
    for name in ("every_position", "decode_step"):
        row = result[name]
        lines.append(f"{name.replace('_', ' '):<24}{row['positions']:>10,}{row['live']:>12.6f}{row['run']:>12.6f}  "
                     f"{'yes' if row['equal'] else 'NO'}")
    cut = result.get("cut_decode_step")
    if cut:
        title = f"cut at verify cost {cut['verify_cost']:g}"
        lines += ["", f"{title:<24}{'steps':>10}{'drafted':>10}{'accepted':>10}{'speedup':>10}  equal"]
        for who in ("live", "run"):
            row = cut[who]
            lines.append(f"{'  ' + who:<24}{row['steps']:>10,}{row['drafted_per_step']:>10.4f}"
                         f"{row['accepted_per_step']:>10.4f}{row['speedup']:>10.4f}"
                         + (f"  {'yes' if cut['equal'] else 'NO'}" if who == "run" else ""))
    lines += ["", f"{'latency (us)':<24}{'calls':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
    for name, row in result["latency_us"].items():
        if row["calls"]:
            lines.append(f"{name:<24}{row['calls']:>10,}" + "".join(f"{row[k]:>10.1f}" for k in ("p50", "p90", "p99", "max")))
    lines += [
        "",
        f"bundle size      {result['bundle_bytes'] / 1e6:.1f} MB",
        f"load time        {result['load_s']:.2f} s",
        f"RSS once loaded  {result['rss_bytes'] / 1e6:.0f} MB (the load added {result['rss_load_bytes'] / 1e6:.0f} MB)",
    ]
    return "\n".join(lines)
