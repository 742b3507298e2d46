"""Stage 7: score the policy on eval, every position and decode step.

Every position: at each response position of each eval trace, the policy picks one candidate
(`selected`); `oracle_best` takes the best candidate; each source is also scored alone.

Decode step: replay each eval trace as a speculative decoder would, advancing by accepted + 1
(or by draft_len on a full draft). The state is causal: copy, n-gram and backoff drafts at a
position are functions of the known prefix only (the same as every position), and prompt
autocomplete is re-walked over the visited positions, since its decoded text depends on them.
The seed's own decode-step loop reuses state that has already seen the whole trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.drafters.autocomplete import PromptAutocomplete
from specdraft.drafters.backoff_walk import backoff_score
from specdraft.errors import SpecdraftError
from specdraft.policy.confidence import scored_mask, scoring_rows, selectable_rows
from specdraft.policy.draft_length import length_study
from specdraft.policy.draft_trees import TREE_BUDGETS, TREE_DRAFTS, tree_accepted, tree_holdings
from specdraft.policy.runs import best_in_runs, rank_in_runs, run_starts
from specdraft.policy.walks import walk_positions
from specdraft.progress import progress
from specdraft.sources.tokenizer import Tokenizer
from specdraft.tables.hashing import lexsort
from specdraft.warehouse.connection import Warehouse, release_unused_memory

if TYPE_CHECKING:
    from specdraft.policy.seed import SourceAveragePolicy

PROMPT_ORDER = families.ORDER["prompt-autocomplete"]
# Scores this close may round to a tie; there the exact backoff score is recomputed.
NEAR_TIE = 1e-7


@dataclass
class Evaluation:
    selected: np.ndarray  # accepted per eval position, the policy's pick
    oracle_best: np.ndarray
    per_source: dict[str, np.ndarray]  # accepted per eval position, each family alone (0 if none)
    proposed: dict[str, int]  # positions where each family proposed a draft
    decode_step: np.ndarray  # accepted per decode-step call
    multi_draft: dict[str, np.ndarray] | None = None  # best of the top-k drafts, or a token tree's, per position
    positions: pa.Table | None = None  # one row per eval position: the choice and its outcome
    multi_draft_decode: dict[str, np.ndarray] | None = None  # the same verified at each decode step
    draft_length: dict | None = None  # draft_length.length_study: fixed and adaptive draft lengths
    # the token trees: per eval position its TREE_DRAFTS best distinct drafts (rank 0 the best),
    # and how many of each draft's tokens the tree of each budget holds (held_b<budget>)
    trees: pa.Table | None = None


def accepted_prefix(draft, actual, limit: int) -> int:
    accepted = 0
    for left, right in zip(draft[:limit], actual[:limit]):
        if left != right:
            break
        accepted += 1
    return accepted


def _fetch(result) -> pa.Table:
    return result.to_arrow_table()


def candidate_policy_scores(cand: pa.Table, policy: SourceAveragePolicy) -> tuple[np.ndarray, np.ndarray]:
    """The seed's policy score per candidate row (and the raw score), with its float operations
    in its order."""
    family = cand.column("family").to_numpy(zero_copy_only=False)
    sources = cand.column("source").to_numpy(zero_copy_only=False)
    raw = cand.column("score").to_numpy(zero_copy_only=False).astype(np.float64)
    is_ngram = family == "ngram"
    counts = cand.column("count").to_numpy(zero_copy_only=False)
    if is_ngram.any():
        ngram_counts = counts[is_ngram].astype(np.int64)
        unique, inverse = np.unique(ngram_counts, return_inverse=True)
        log1p = np.array([math.log1p(int(c)) for c in unique.tolist()])
        raw[is_ngram] = raw[is_ngram] + log1p[inverse]
    return policy.scores(sources, raw), raw


def _group_starts(trace_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    if len(trace_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    change = (trace_ids[1:] != trace_ids[:-1]) | (positions[1:] != positions[:-1])
    return np.concatenate([[0], np.flatnonzero(change) + 1])


def _resolve_near_ties(wh, cand, scores, raw, starts, policy) -> np.ndarray:
    """Recompute the exact backoff score where a rounding difference could change the pick."""
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(scores))))
    best = np.maximum.reduceat(scores, starts)
    close = np.abs(scores - best[group]) <= NEAR_TIE * np.maximum(np.abs(best[group]), 1.0)
    n_close = np.bincount(group[close], minlength=len(starts))
    family = cand.column("family").to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(close & (n_close[group] > 1) & (family == "backoff"))
    if not len(rows):
        return scores
    trace_ids = cand.column("trace_id").to_numpy()[rows]
    positions = cand.column("pos").to_numpy()[rows]
    wh.register("near_ties", pa.table({"trace_id": trace_ids, "pos": positions}))
    steps = {
        (t, p): (c, n, d)
        for t, p, c, n, d in wh.query("policy/backoff_steps").fetchall()
    }
    scores = scores.copy()
    sources = cand.column("source").to_numpy(zero_copy_only=False)
    for row, trace_id, pos in zip(rows.tolist(), trace_ids.tolist(), positions.tolist()):
        ctx_lens, counts, totals = steps[(trace_id, pos)]
        exact = backoff_score(ctx_lens, counts, totals)
        raw[row] = exact
        scores[row] = policy.score_one(str(sources[row]), exact)
    return scores


def evaluate(wh: Warehouse, cfg: RunConfig, tokenizer: Tokenizer, traces_path: Path,
             policy: SourceAveragePolicy) -> Evaluation:
    traces = _fetch(wh.query("policy/eval_traces", {"traces_path": str(traces_path)}))
    n_resp = (traces.column("n_tokens").to_numpy() - traces.column("prompt_len").to_numpy()).astype(np.int64)
    trace_ids = traces.column("trace_id").to_numpy()
    offsets = np.concatenate([[0], np.cumsum(n_resp)])
    trace_index = {int(t): i for i, t in enumerate(trace_ids.tolist())}
    n_positions = int(offsets[-1])

    cand = _fetch(wh.query("policy/eval_candidates"))
    scores, raw = candidate_policy_scores(cand, policy)
    cand_trace = cand.column("trace_id").to_numpy()
    cand_pos = cand.column("pos").to_numpy()
    starts = _group_starts(cand_trace, cand_pos)
    scores = _resolve_near_ties(wh, cand, scores, raw, starts, policy)
    accepted = cand.column("accepted").to_numpy().astype(np.int64)
    family_order = cand.column("family_order").to_numpy().astype(np.int64)
    cpos = cand.column("completion_pos").to_numpy().astype(np.int64)
    flat = np.array([offsets[trace_index[int(t)]] for t in cand_trace[starts].tolist()], dtype=np.int64)
    flat = flat + cpos[starts] if len(starts) else flat
    row_flat = np.repeat(flat, np.diff(np.append(starts, len(scores))))

    selected = np.zeros(n_positions, dtype=np.int64)
    oracle = np.zeros(n_positions, dtype=np.int64)
    chosen_source = np.full(n_positions, None, dtype=object)
    chosen_ctx = np.zeros(n_positions, dtype=np.int64)
    if len(starts):
        picks = best_in_runs(scores, starts)
        selected[flat] = accepted[picks]
        oracle[flat] = np.maximum.reduceat(accepted, starts)
        chosen_source[flat] = cand.column("source").to_numpy(zero_copy_only=False)[picks]
        chosen_ctx[flat] = cand.column("ctx_len").fill_null(0).to_numpy()[picks]
    per_source, proposed = {}, {}
    for name in families.SEED:
        rows = family_order == families.ORDER[name]
        alone = np.zeros(n_positions, dtype=np.int64)
        alone[row_flat[rows]] = accepted[rows]
        per_source[name] = alone
        proposed[name] = int(rows.sum())

    # Decode step. The best non-prompt candidate per position (they are causal functions of the
    # prefix); prompt autocomplete is re-walked below.
    best_other_score = np.full(n_positions, -np.inf)
    best_other_order = np.full(n_positions, len(families.NAMES), dtype=np.int64)
    best_other_accepted = np.zeros(n_positions, dtype=np.int64)
    other = np.flatnonzero(family_order != PROMPT_ORDER)
    if len(other):
        other_starts = _group_starts(cand_trace[other], cand_pos[other])
        other_picks = other[best_in_runs(scores[other], other_starts)]
        where = row_flat[other_picks]
        best_other_score[where] = scores[other_picks]
        best_other_order[where] = family_order[other_picks]
        best_other_accepted[where] = accepted[other_picks]
    decode = decode_step_walk(cfg, tokenizer, traces, offsets, policy,
                              best_other_score, best_other_order, best_other_accepted)
    positions = positions_table(trace_ids, traces.column("prompt_len").to_numpy(), n_resp,
                                selected, oracle, chosen_source, chosen_ctx)
    return Evaluation(selected, oracle, per_source, proposed, decode, positions=positions)


def positions_table(trace_ids, prompt_lens, n_resp, selected, oracle, chosen_source, chosen_ctx,
                    second_source=None) -> pa.Table:
    """One row per eval position (trace order, then position): what was chosen and how it did,
    and (--preset default) the choice made there after a chained token (second_source: the draft
    the pick before it proposes after its first token, where that token is the trace's)."""
    n_resp = np.asarray(n_resp, dtype=np.int64)
    starts = np.repeat(np.cumsum(n_resp) - n_resp, n_resp)
    completion_pos = np.arange(int(n_resp.sum())) - starts
    return pa.table(
        {
            "trace_id": np.repeat(np.asarray(trace_ids, dtype=np.int64), n_resp),
            "pos": np.repeat(np.asarray(prompt_lens, dtype=np.int64), n_resp) + completion_pos,
            "completion_pos": completion_pos,
            "source": pa.array(chosen_source.tolist(), pa.string()),
            "ctx_len": chosen_ctx,
            "accepted": selected,
            "oracle_accepted": oracle,
            "second_source": pa.nulls(len(selected), pa.string()) if second_source is None
            else pa.array(second_source.tolist(), pa.string()),
        }
    )


def decode_step_walk(cfg, tokenizer, traces, offsets, policy, best_score, best_order, best_accepted) -> np.ndarray:
    draft_len = cfg.draft_len
    values: list[int] = []
    rows = zip(
        traces.column("prompt_len").to_pylist(),
        traces.column("tokens").to_pylist(),
        traces.column("prompt").to_pylist(),
        offsets[:-1].tolist(),
    )
    for prompt_len, tokens, prompt, offset in progress(rows, desc="decode step", unit="trace",
                                                     total=traces.num_rows):
        drafter = PromptAutocomplete(tokenizer, prompt, tokens, prompt_len, draft_len)
        n_resp = len(tokens) - prompt_len
        cpos = 0
        while cpos < n_resp:
            at = offset + cpos
            score, order, accepted = best_score[at], best_order[at], int(best_accepted[at])
            proposal = drafter.propose(drafter.line_at(cpos))
            if proposal is not None:
                draft, raw = proposal
                prompt_score = policy.score_one("prompt-autocomplete", raw)
                if prompt_score > score or (prompt_score == score and PROMPT_ORDER < order):
                    known = prompt_len + cpos
                    accepted = accepted_prefix(draft, tokens[known : known + draft_len], draft_len)
            values.append(accepted)
            cpos += accepted if accepted == draft_len else accepted + 1
    return np.array(values, dtype=np.int64)


# -- --preset default: the confidence policy ------------------------------------------------------

MULTI_DRAFT = (2, 4)


def evaluate_confidence(wh: Warehouse, cfg: RunConfig, policy, exclude_families: tuple[str, ...] = ()) -> Evaluation:
    """Every position, decode step and multi-draft acceptance under the confidence policy.

    Every source here is a function of the known prefix (prompt autocomplete decodes the current
    line whole: drafters/autocomplete.py), so the decode-step walk reads the every-position
    choices, which are what the live drafter proposes in that walk.
    """
    lengths = _fetch(wh.query("policy/eval_lengths"))
    n_resp = lengths.column("n_response").to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(n_resp)])
    eval_trace_ids = lengths.column("trace_id").to_numpy()  # sorted
    prompt_lens = lengths.column("prompt_len").to_numpy()
    n_positions = int(offsets[-1])

    everything = eval_features(wh)
    all_accepted = everything.column("accepted").to_numpy().astype(np.int64)
    all_flat = offsets[np.searchsorted(eval_trace_ids, everything.column("trace_id").to_numpy())]
    all_flat = all_flat + everything.column("completion_pos").to_numpy().astype(np.int64)
    # each draft's family as a code into `names`, in order of first appearance (no Python string
    # per draft: the eval split has about a million)
    family = everything.column("family").combine_chunks().dictionary_encode()
    names = family.dictionary.to_pylist()
    all_family = family.indices.to_numpy(zero_copy_only=False)
    # the drafts the model scores (confidence.scored: the choices, and the evidence drafts that only
    # branch the token trees and multi-draft proposals); only those are scored: a family outside
    # them (the seed's n-gram) has one draft a position, so its own pick below needs no score
    # (development set: 67,011 of 943,024 eval drafts)
    scored_rows = np.flatnonzero(scored_mask(everything, exclude_families))
    is_choice = selectable_rows(everything, exclude_families)[scored_rows]
    accepted, flat = all_accepted[scored_rows], all_flat[scored_rows]
    draft_keys = everything.column("draft_key").to_numpy()[scored_rows]
    # each distinct draft at a position is scored once, from its scorer's features (scoring_rows)
    scorers = scoring_rows(flat, draft_keys, is_choice)
    own = scorers == np.arange(len(scored_rows))
    to_score = np.zeros(everything.num_rows, dtype=bool)
    to_score[scored_rows[own]] = True
    # the model's scores, and the first choice's (ConfidencePolicy.scores: the chain model's for
    # the chain families' drafts); the rankings other than the first choice read the model's
    predicted = np.zeros(len(scored_rows))
    predicted[own], firsts = policy.scores(everything, to_score)
    first_predicted = predicted.copy()
    if firsts is not None:
        first_predicted[own] = firsts
    predicted, first_predicted = predicted[scorers], first_predicted[scorers]
    all_predicted = np.zeros(everything.num_rows)
    all_predicted[scored_rows] = predicted
    lengths_of = everything.column("draft_tokens").to_numpy()[scored_rows]
    scored = everything.select(["trace_id", "pos", "source", "ctx_len"]).take(pa.array(scored_rows))
    choice = np.flatnonzero(is_choice)  # rows of `scored`
    starts = run_starts(flat[choice])
    selected = np.zeros(n_positions, dtype=np.int64)
    oracle = np.zeros(n_positions, dtype=np.int64)
    multi = {f"top{k}": np.zeros(n_positions, dtype=np.int64) for k in MULTI_DRAFT}
    chosen_source = np.full(n_positions, None, dtype=object)
    second_source = np.full(n_positions, None, dtype=object)
    chosen_ctx = np.zeros(n_positions, dtype=np.int64)
    if len(starts):
        picks = choice[best_in_runs(first_predicted[choice], starts)]
        selected[flat[picks]] = accepted[picks]
        oracle[flat[choice][starts]] = np.maximum.reduceat(accepted[choice], starts)
        chosen_source[flat[picks]] = scored.column("source").take(pa.array(picks)).to_numpy(zero_copy_only=False)
        chosen_ctx[flat[picks]] = scored.column("ctx_len").to_numpy()[picks]
        # the choice after a chained token: the model's pick, without the chain model (without
        # one, the first choice itself)
        seconds = picks if firsts is None else choice[best_in_runs(predicted[choice], starts)]
        second_source[flat[seconds]] = scored.column("source").take(pa.array(seconds)).to_numpy(zero_copy_only=False)
        second_accepted = np.zeros(n_positions, dtype=np.int64)
        second_accepted[flat[seconds]] = accepted[seconds]
        second_len = np.zeros(n_positions, dtype=np.int64)
        second_len[flat[seconds]] = lengths_of[seconds]
        # the positions whose pick chooses again past its first token (ConfidencePolicy.chain)
        chained = np.zeros(n_positions, dtype=bool)
        chained[flat[picks]] = np.isin(all_family[scored_rows[picks]],
                                       [code for code, name in enumerate(names) if name in policy.chain])
        ranked = distinct_ranks(predicted, flat, draft_keys)
        for k in MULTI_DRAFT:
            multi[f"top{k}"] = _best_of_top(ranked, accepted, flat, k, n_positions)
        # the most any draft the trees choose from gets: what an unbounded tree would
        every = run_starts(flat)
        multi["all_drafts"] = np.zeros(n_positions, dtype=np.int64)
        multi["all_drafts"][flat[every]] = np.maximum.reduceat(accepted, every)
        # each token tree from the position's TREE_DRAFTS best distinct drafts, best first
        tree_rows = top_distinct(ranked, TREE_DRAFTS)
        wanted = np.concatenate([tree_rows, picks])  # the trees' drafts, then the chosen ones
        wanted_keys = (scored.column("trace_id").to_numpy()[wanted], scored.column("pos").to_numpy()[wanted],
                       scored.column("source").take(pa.array(wanted)))
    del scored  # the features are not read again: the trees' tokens take their place
    per_source, proposed = {}, {}
    for code, name in enumerate(names):  # the dictionary lists them in order of first appearance
        # the source alone: its own best-scored draft at each position where it has one
        rows = np.flatnonzero(all_family == code)
        own_starts = run_starts(all_flat[rows])
        own_picks = rows[best_in_runs(all_predicted[rows], own_starts)]
        alone = np.zeros(n_positions, dtype=np.int64)
        alone[all_flat[own_picks]] = all_accepted[own_picks]
        per_source[name] = alone
        proposed[name] = len(own_picks)
    for name in policy.families:  # a family the preset proposes with no eval draft: 0, as the seed's
        if name not in per_source and (name != "online" or cfg.online):
            per_source[name] = np.zeros(n_positions, dtype=np.int64)
            proposed[name] = 0
    del everything, family
    # the features' pages, which Arrow's allocator keeps, and the C heap's free ones: the evaluate
    # stage's peak on the development set 1.05-1.06 GiB against 1.10-1.14 GiB
    release_unused_memory()
    draft_length, trees = None, None
    if len(starts) and policy.curves is not None:
        wanted_drafts = _eval_drafts(wh, *wanted_keys)
        drafts, chosen_drafts = wanted_drafts[: len(tree_rows)], wanted_drafts[len(tree_rows):]
        held = tree_holdings(policy.curves, predicted[tree_rows], flat[tree_rows], drafts, TREE_BUDGETS)
        for budget, values in held.items():
            multi[f"tree_b{budget}"] = tree_accepted(accepted[tree_rows], flat[tree_rows], values, n_positions)
        tree_starts = run_starts(flat[tree_rows])
        trees = pa.table({
            "trace_id": wanted_keys[0][: len(tree_rows)],
            "pos": wanted_keys[1][: len(tree_rows)],
            "rank": rank_in_runs(tree_starts, len(tree_rows)),
            "draft": drafts,
            **{f"held_b{budget}": values for budget, values in held.items()},
        })
        chosen_raw, chosen_len = np.zeros(n_positions), np.zeros(n_positions, dtype=np.int64)
        # what live propose(verify_cost) cuts by: a chained pick's score is the chain model's,
        # whose target (the chained acceptance) the acceptance curves were not fitted on; its cut
        # is read off them as it stands, here and live alike
        chosen_raw[flat[picks]] = first_predicted[picks]
        chosen_len[flat[picks]] = lengths_of[picks]
        pick_at = np.full(n_positions, -1, dtype=np.int64)
        pick_at[flat[picks]] = np.arange(len(picks))

        def filled(at: np.ndarray, after: np.ndarray) -> np.ndarray:
            trace = np.searchsorted(offsets, at, side="right") - 1
            return _accepted_after(wh, eval_trace_ids[trace], prompt_lens[trace] + at - offsets[trace],
                                   chosen_drafts.take(pa.array(pick_at[at])), after + 1)

        selected = chained_acceptance(selected, chained, chosen_len, offsets, cfg.draft_len, filled,
                                      second_accepted, second_len)
        draft_length = length_study(policy.curves, selected, chosen_raw, chosen_len, offsets, cfg.verify_cost)
    decode = decode_walk_from_choices(selected, offsets, cfg.draft_len)
    multi_decode = {name: decode_walk_from_choices(values, offsets, cfg.draft_len) for name, values in multi.items()}
    positions = positions_table(eval_trace_ids, prompt_lens, n_resp,
                                selected, oracle, chosen_source, chosen_ctx, second_source)
    return Evaluation(selected, oracle, per_source, proposed, decode, multi, positions, multi_decode, draft_length,
                      trees)


def chained_acceptance(accepted: np.ndarray, chained: np.ndarray, lengths: np.ndarray, offsets: np.ndarray,
                       draft_len: int, filled: Callable[[np.ndarray, np.ndarray], np.ndarray],
                       second_accepted: np.ndarray | None = None, second_lengths: np.ndarray | None = None) -> np.ndarray:
    """What each position's draft accepts where its pick chooses again past its first token
    (`chained`, and the pick a whole draft_len long; lengths: each position's chosen draft's): the
    first token, then the choice at the next position as if that token had been written, and where
    that choice is shorter, the pick's own tokens after it, so that the draft is draft_len long.
    The live drafter makes that choice on the token it drafted; where the token is the trace's, it
    is the next position's choice after a chained token (second_accepted, second_lengths: what it
    accepted and its length at each position; by default the position's own pick, where the first
    choice has no chain model), whose acceptance is known here, and where it is not, nothing past
    it is accepted either way: the acceptance is exact, though the tokens after a wrong first one
    are not known here. At a trace's last position at most one token is left to accept.
    filled(positions, next_lengths): how many of the pick's tokens after a next choice accepted
    whole are accepted too (policy/eval_next_tokens.sql compares them with the trace).

    >>> chained_acceptance(np.array([3, 5, 0, 2, 1]), np.array([True, False, True, True, False]),
    ...                    np.array([16, 16, 16, 16, 16]), np.array([0, 5]), 16, lambda at, n: np.zeros(len(at), int)).tolist()
    [6, 5, 0, 2, 1]
    >>> chained_acceptance(np.array([3, 5, 0, 2, 1]), np.array([True, False, True, True, False]),
    ...                    np.array([16, 16, 16, 16, 16]), np.array([0, 5]), 16, lambda at, n: np.zeros(len(at), int),
    ...                    np.array([3, 9, 0, 2, 4]), np.array([16, 16, 16, 16, 16])).tolist()
    [10, 5, 0, 5, 1]
    """
    second_accepted = accepted if second_accepted is None else second_accepted
    second_lengths = lengths if second_lengths is None else second_lengths
    n = len(accepted)
    last = np.zeros(n, dtype=bool)
    last[offsets[1:] - 1] = True  # each trace's last position: no next position here
    next_accepted = np.r_[second_accepted[1:], 0]
    next_length = np.r_[second_lengths[1:], 0]
    chain = chained & (accepted >= 1) & ~last & (lengths == draft_len)
    out = accepted.copy()
    out[chain] = 1 + np.minimum(next_accepted[chain], draft_len - 1)
    whole = np.flatnonzero(chain & (next_accepted == next_length) & (next_length < draft_len - 1))
    out[whole] += filled(whole, next_length[whole])
    return out


def _accepted_after(wh: Warehouse, trace_ids: np.ndarray, positions: np.ndarray, drafts: pa.ListArray,
                    starts: np.ndarray) -> np.ndarray:
    """How many of each draft's tokens from `starts` on match the trace's tokens at the same
    places (each draft drafted at its eval position; starts: 0-based places in the draft)."""
    if not len(trace_ids):
        return np.zeros(0, dtype=np.int64)
    wh.register("wanted_windows", pa.table({"row": np.arange(len(trace_ids)), "trace_id": trace_ids, "pos": positions}))
    actual = wh.query("policy/eval_next_tokens").to_arrow_table().column("next_tokens").to_pylist()
    if len(actual) != len(trace_ids):
        raise SpecdraftError(f"eval_next_tokens.sql found {len(actual)} of the {len(trace_ids)} positions wanted")
    return np.array([accepted_prefix(draft[start:], tokens[start:], len(draft) - start)
                     for draft, tokens, start in zip(drafts.to_pylist(), actual, starts.tolist())], dtype=np.int64)


def _eval_drafts(wh: Warehouse, trace_ids: np.ndarray, positions: np.ndarray, sources: pa.Array) -> pa.ListArray:
    """The tokens of the eval drafts named by (trace id, position, source), in that order; each
    must be one of candidates'."""
    wh.register("wanted_drafts", pa.table({"row": np.arange(len(trace_ids)), "trace_id": trace_ids,
                                           "pos": positions, "source": sources}))
    drafts = wh.query("policy/eval_drafts").to_arrow_table()
    if drafts.num_rows != len(trace_ids):
        raise SpecdraftError(f"eval_drafts.sql found {drafts.num_rows} of the {len(trace_ids)} drafts wanted")
    return drafts.column("draft").combine_chunks()


def eval_features(wh: Warehouse) -> pa.Table:
    """What the confidence model sees of every eval draft (candidate_features), in position order.
    DuckDB keeps the table blocks it read them from cached, which go before the scoring: 185 MB on
    the development set."""
    features = wh.query("policy/eval_features").to_arrow_table()
    wh.release_cached_memory()
    return features


def _best_of_top(ranked, accepted, flat, k, n_positions) -> np.ndarray:
    """Best accepted among the k highest-scored distinct drafts at each position, as a tree
    verifier checking k drafts at once would get (ranked: distinct_ranks)."""
    top = top_distinct(ranked, k)
    best = np.zeros(n_positions, dtype=np.int64)
    np.maximum.at(best, flat[top], accepted[top])
    return best


def distinct_ranks(predicted, flat, draft_keys) -> tuple[np.ndarray, np.ndarray]:
    """The distinct drafts at each position, best-scored first (ties to the earlier row; of a
    draft proposed twice, its best-scored copy), as rows by position, and each one's rank at its
    position: what top_distinct keeps the first k of. Rows are grouped by flat position."""
    order = lexsort((-predicted, flat))
    flat_sorted, keys_sorted = flat[order], draft_keys[order]
    # drop repeats of a draft at a position (keep the best-scored copy: lexsort is stable, so a
    # draft's copies stay best first)
    by_draft = lexsort((keys_sorted, flat_sorted))
    repeat = np.zeros(len(order), dtype=bool)
    same = (flat_sorted[by_draft][1:] == flat_sorted[by_draft][:-1]) & (keys_sorted[by_draft][1:] == keys_sorted[by_draft][:-1])
    repeat[by_draft[1:][same]] = True
    kept = order[~repeat]
    return kept, rank_in_runs(run_starts(flat[kept]), len(kept))


def top_distinct(ranked: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """The rows of the k highest-scored distinct drafts at each position, by position and then
    best first (ranked: distinct_ranks, computed once for every k): the live drafter's
    propose_many(k)."""
    kept, rank = ranked
    return kept[rank < k]


def decode_walk_from_choices(selected: np.ndarray, offsets: np.ndarray, draft_len: int) -> np.ndarray:
    """Replay each trace: at response position c take the chosen draft's accepted length a, then
    move to c + a + 1 (or c + draft_len on a full draft)."""
    selected = np.asarray(selected, dtype=np.int64)
    jump = np.where(selected == draft_len, draft_len, selected + 1)
    return selected[walk_positions(jump, offsets)]
