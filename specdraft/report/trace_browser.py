"""The report's trace browser: eval traces as text, every token shaded by how many tokens the
chosen draft accepted there, and every source's draft at a token on pointing at it.

The page embeds its traces as JSON (so it opens offline and stays small): the TOP best and
BOTTOM worst traces by mean accepted and a SAMPLE of the rest (seeded), or all with
`specdraft report --all-traces`. Each position's drafts come from the warehouse's candidates
table, scored as the run's policy scores them: --preset default's confidence model (the run's
recorded trees, as expected accepted tokens), --preset seed's calibrated source averages. The
candidates table holds the latest build's drafts: for a run whose tables a later build replaced
(other settings, data or code: the run's recorded build keys, pipeline.stale_stages), the page
shows the text and choices but no drafts, and says why.
"""

from __future__ import annotations

import json
import math
import random
from html import escape

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from specdraft.config import RunConfig
from specdraft.warehouse.connection import Warehouse

TOP, BOTTOM, SAMPLE = 2, 2, 4  # traces embedded (unless all): about 1 MB of page for 16-token drafts


def browser_data(wh: Warehouse, results: dict, all_traces: bool = False, replaced: bool | None = None) -> dict:
    """What the browser embeds: the traces listed, and for the embedded ones their tokens, the
    run's choice at each position and every source's draft there. replaced: whether the dataset
    was ingested afresh since the run (pipeline.data_changed_since), if the caller knows."""
    from specdraft.pipeline import data_changed_since, stale_stages

    run_id = results["run_id"]
    listing = wh.query("report/trace_acceptance", {"run_id": run_id}).fetchall()
    # the text comes from the dataset's traces as they are now: none, where they changed since
    if replaced is None:
        replaced = data_changed_since(wh, run_id)
    chosen = set() if replaced else _embedded(listing, all_traces)
    wh.register("browser_traces", pa.table({"trace_id": pa.array(sorted(chosen), pa.int64())}))
    tokens = wh.query("report/browser_tokens", {"run_id": run_id}).to_arrow_table()
    stale = "candidates" in stale_stages(wh, results)
    drafts = None if stale else _scored_drafts(wh, results)
    sources: dict[str, int] = {}
    traces = {trace_id: {"id": trace_id, "tokens": [], "chosen": [], "drafts": []} for trace_id in chosen}
    for trace_id, pos, piece, source, accepted, oracle in zip(*(tokens.column(c).to_pylist() for c in (
            "trace_id", "pos", "piece", "source", "accepted", "oracle_accepted"))):
        trace = traces[trace_id]
        trace.setdefault("start", pos)
        trace["tokens"].append(piece)
        trace["chosen"].append([sources.setdefault(source, len(sources)) if source else -1, accepted or 0,
                                oracle or 0])
        trace["drafts"].append([])
    if drafts is not None:
        # one row per distinct draft at a position: its best-scored source's, the others named
        for trace_id, pos, source, accepted, score, text in drafts:
            trace = traces[trace_id]
            here = trace["drafts"][pos - trace["start"]]
            same = next((d for d in here if d[3] == text), None)
            if same is None:
                here.append([sources.setdefault(source, len(sources)), accepted, score, text, 0])
            elif (score if score is not None else -math.inf) > (same[2] if same[2] is not None else -math.inf):
                same[:3], same[4] = [sources.setdefault(source, len(sources)), accepted, score], same[4] + 1
            else:
                same[4] += 1
    return {
        "run_id": run_id,
        "preset": results.get("preset"),
        "draft_len": results.get("draft_len", RunConfig.recorded(results["config"]).draft_len),
        "score": "expected accepted tokens (the confidence model)" if results.get("preset") == "default"
                 else "the seed policy's score (calibrated source average)",
        "drafts_note": ("text and drafts not shown: the dataset was ingested afresh since this run" if replaced else
                        "drafts not shown: a later build replaced the candidates table (other settings, data or code)"
                        if stale else ""),
        "sources": list(sources),
        "list": [[t, n, round(m, 4), round(o, 4), t in traces] for t, n, m, o in listing],
        "traces": [traces[t] for t in sorted(traces)],
    }


def _embedded(listing: list[tuple], all_traces: bool) -> set[int]:
    """The traces whose text is embedded: all, or the TOP best, BOTTOM worst and a SAMPLE."""
    ids = [row[0] for row in sorted(listing, key=lambda row: (-row[2], row[0]))]
    if all_traces or len(ids) <= TOP + BOTTOM + SAMPLE:
        return set(ids)
    rest = ids[TOP:-BOTTOM]
    return {*ids[:TOP], *ids[-BOTTOM:], *random.Random(0).sample(rest, SAMPLE)}


def _scored_drafts(wh: Warehouse, results: dict) -> list[tuple]:
    """(trace_id, pos, source, accepted, score, text) per draft, scored as the run's policy does."""
    drafts = wh.query("report/browser_drafts").to_arrow_table()
    if results.get("preset") == "default":
        scores = _confidence_scores(wh, results, drafts)
    else:
        from specdraft.policy.evaluate import candidate_policy_scores
        from specdraft.policy.seed import SourceAveragePolicy

        scores = candidate_policy_scores(drafts, SourceAveragePolicy.from_dict(results["policy"]))[0]
    texts = draft_texts(drafts.column("draft").combine_chunks(), _pieces(wh))
    return list(zip(*(drafts.column(c).to_pylist() for c in ("trace_id", "pos", "source", "accepted")),
                    [None if s is None or not math.isfinite(s) else round(float(s), 4) for s in scores],
                    texts.to_pylist()))


def _pieces(wh: Warehouse) -> pa.Array:
    """Each token id's text piece, at its id (null where the vocabulary has no such id): what
    as_text() joins for a list of ids."""
    vocab = wh.query("report/vocab_pieces").to_arrow_table()
    ids = vocab.column("token_id").to_numpy()
    at = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int64)
    at[ids] = np.arange(len(ids))
    return vocab.column("piece").combine_chunks().take(pa.array(at, mask=at < 0))


def draft_texts(drafts: pa.ListArray, pieces: pa.Array) -> pa.Array:
    """Each draft's text: its tokens' pieces joined (an unknown id renders as nothing), in Arrow
    (a Python join per draft took 0.9 s of the default preset's report).

    >>> draft_texts(pa.array([[1, 0], [], [2, 7]]), pa.array(["a", "b", None])).to_pylist()
    ['ba', '', '']
    """
    drafts = drafts.cast(pa.list_(pa.int64()))
    ids = pc.list_flatten(drafts).to_numpy(zero_copy_only=False)
    known = (ids >= 0) & (ids < len(pieces))
    flat = pieces.take(pa.array(np.where(known, ids, 0), mask=~known)).fill_null("")
    offsets = pa.array(drafts.offsets.to_numpy() - drafts.offsets[0].as_py(), pa.int32())
    return pc.binary_join(pa.ListArray.from_arrays(offsets, flat), "")


def _confidence_scores(wh: Warehouse, results: dict, drafts: pa.Table) -> list[float | None]:
    """The confidence model's expected accepted tokens for each draft it scores (None for the
    evidence-only ones it never chooses), from the run's recorded trees: what the first choice at
    a position compares, so with a chain model (--chain-model) its estimate for the chain
    families' drafts, and for a draft several sources proposed, the estimate of its scorer's
    features (the run scores each distinct draft once)."""
    from specdraft.errors import SpecdraftError
    from specdraft.live.bundle import recorded_trees
    from specdraft.policy.confidence import (
        feature_matrix,
        position_ids,
        scored_mask,
        scoring_rows,
        selectable_rows,
    )
    from specdraft.policy.trees import TreeEnsemble

    try:
        trees = recorded_trees(wh, results["run_id"])
    except SpecdraftError:  # nothing learnt (or a run before the trees were recorded)
        return [None] * drafts.num_rows
    features = wh.query("report/browser_features").to_arrow_table()
    width = len(results["policy"]["features"])
    matrix = feature_matrix(features)
    raw = TreeEnsemble(float(results["policy"]["baseline"]), trees, width).raw_predict(matrix)
    if results["policy"].get("chain_model"):
        chain = TreeEnsemble(float(results["policy"]["chain_baseline"]),
                             recorded_trees(wh, results["run_id"], chain=True), width)
        chained = np.isin(features.column("family").to_numpy(zero_copy_only=False), results["policy"]["chain"])
        if chained.any():
            raw[chained] = chain.raw_predict(matrix[chained])
    if results["policy"].get("scoring") == "per-draft":
        # each distinct draft at a position takes its scorer's score, as the run compared them
        # (confidence.scoring_rows: the first copy the policy may choose)
        rows = np.flatnonzero(scored_mask(features))
        at = features.take(pa.array(rows))
        raw[rows] = raw[rows][scoring_rows(position_ids(at), at.column("draft_key").to_numpy(), selectable_rows(at))]
    expected = np.exp(raw)
    chosen_from = set(results["policy"]["choices"])
    by_key = {(t, p, s): (e if f in chosen_from else None) for t, p, s, f, e in zip(
        *(features.column(c).to_pylist() for c in ("trace_id", "pos", "source", "family")), expected.tolist())}
    return [by_key.get(key) for key in zip(*(drafts.column(c).to_pylist() for c in ("trace_id", "pos", "source")))]


# In a <script> block the HTML parser still reads "<!--", "<script" and "</script": escaping
# only "</" let a trace's "<!--<script>" keep the block open past its end, which swallowed the
# page's own script. JSON may write every "<", ">" and "&" as \u escapes, and then the block
# holds none of them (as Django's json_script).
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def script_json(data) -> str:
    r"""`data` as JSON to embed in a <script> block: no <, > or & in it, the same value read back.

    >>> script_json({"text": "<!--<script>a & b</script>"})
    '{"text":"\\u003c!--\\u003cscript\\u003ea \\u0026 b\\u003c/script\\u003e"}'
    """
    return json.dumps(data, separators=(",", ":")).translate(_SCRIPT_SAFE)


def browser_section(data: dict) -> str:
    """The browser's HTML: the trace list, the trace's text, the drafts panel, the data and the
    script (no network: everything is in the page)."""
    blob = script_json(data)
    note = f'<p class="note">{escape(data["drafts_note"])}</p>' if data["drafts_note"] else ""
    return f"""<h2>Trace browser</h2>
<p>Each eval trace's response as text; a token's background is how many tokens the chosen draft
accepted there (white 0, dark {data['draft_len']}). Point at a token to see every source's draft
there, with its accepted length and {escape(data['score'])}. ⏎ is a newline, · a space.
Traces with text embedded are marked ▸; click one to show it, click a column to sort.</p>{note}
<table id="trace-list"><thead><tr><th data-key="0">trace</th><th data-key="1">positions</th>
<th data-key="2">mean accepted</th><th data-key="3">oracle</th></tr></thead><tbody></tbody></table>
<div id="trace-view"><p id="trace-title"></p><div id="trace-text"></div></div>
<div id="draft-panel"><p>Point at a token.</p></div>
<script type="application/json" id="trace-data">{blob}</script>
<script>{_SCRIPT}</script>
"""


BROWSER_STYLE = """#trace-list{max-height:300px;overflow-y:auto;display:block}#trace-list th{cursor:pointer}
#trace-list tr.embedded{cursor:pointer}#trace-list tr.current{background:#e8f0ff}
#trace-text{font-family:ui-monospace,monospace;font-size:13px;line-height:1.7;white-space:pre-wrap;overflow-wrap:anywhere;
border:1px solid #ddd;padding:8px;max-height:480px;overflow-y:auto}
#trace-text span.tok{border-radius:2px}#trace-text span.tok:hover{outline:2px solid #d55e00}
#draft-panel{position:sticky;bottom:0;background:#fff;border-top:2px solid #0072b2;padding:6px;
min-height:4em;max-height:45vh;overflow-y:auto}#draft-panel code{white-space:pre-wrap;word-break:break-all}
#draft-panel tr.chosen{background:#e8f0ff}.note{color:#a33}"""

_SCRIPT = r"""
(function () {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const list = document.querySelector("#trace-list tbody");
  const text = document.getElementById("trace-text");
  const title = document.getElementById("trace-title");
  const panel = document.getElementById("draft-panel");
  const byId = new Map(data.traces.map(t => [t.id, t]));
  const visible = s => s.replace(/\n/g, "⏎\n").replace(/ /g, "·");
  const esc = s => s.replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  let rows = data.list.slice(), sortKey = 2, descending = true, current = null;
  function drawList() {
    rows.sort((a, b) => (descending ? b[sortKey] - a[sortKey] : a[sortKey] - b[sortKey]) || a[0] - b[0]);
    list.innerHTML = rows.map(r => `<tr data-trace="${r[0]}" class="${r[4] ? "embedded" : ""}${r[0] === current ? " current" : ""}">` +
      `<td>${r[4] ? "▸ " : ""}${r[0]}</td><td>${r[1]}</td><td>${r[2].toFixed(3)}</td><td>${r[3].toFixed(3)}</td></tr>`).join("");
  }
  function shade(accepted) {
    const x = Math.min(accepted / data.draft_len, 1);
    return `rgba(0, 114, 178, ${(0.08 + 0.85 * Math.sqrt(x)) * (accepted > 0)})`;
  }
  function show(id) {
    const t = byId.get(id);
    if (!t) return;
    current = id;
    const mean = t.chosen.reduce((s, c) => s + c[1], 0) / Math.max(t.chosen.length, 1);
    title.textContent = `trace ${id}: ${t.tokens.length} response tokens, mean accepted ${mean.toFixed(3)}`;
    text.innerHTML = t.tokens.map((piece, i) => `<span class="tok" data-i="${i}" style="background:${shade(t.chosen[i][1])};` +
      `color:${t.chosen[i][1] > data.draft_len / 2 ? "#fff" : "#111"}">${esc(visible(piece))}</span>`).join("");
    drawList();
  }
  function point(event) {
    const span = event.target.closest("span.tok");
    if (!span || current === null) return;
    const t = byId.get(current), i = +span.dataset.i, [source, accepted, oracle] = t.chosen[i];
    const drafts = t.drafts[i].slice().sort((a, b) => (b[2] ?? -1e9) - (a[2] ?? -1e9));
    panel.innerHTML = `<p>position ${t.start + i} (response token ${i}): chose <b>${esc(data.sources[source] ?? "nothing")}</b>, ` +
      `accepted ${accepted} (the best of the drafts here: ${oracle})</p>` + (drafts.length ? `<table class="drafts"><tr><th>source</th>` +
      `<th>accepted</th><th>score</th><th>draft</th></tr>` + drafts.map(d => `<tr class="${data.sources[d[0]] === data.sources[source] ? "chosen" : ""}">` +
      `<td>${esc(data.sources[d[0]])}${d[4] ? ` (+${d[4]} more)` : ""}</td><td>${d[1]}</td><td>${d[2] === null ? "" : d[2].toFixed(3)}</td>` +
      `<td><code>${esc(visible(d[3]))}</code></td></tr>`).join("") + "</table>" : "<p>no drafts here</p>");
  }
  document.querySelector("#trace-list thead").addEventListener("click", e => {
    const key = +e.target.dataset.key;
    if (Number.isNaN(key)) return;
    descending = key === sortKey ? !descending : true;
    sortKey = key;
    drawList();
  });
  list.addEventListener("click", e => { const tr = e.target.closest("tr"); if (tr) show(+tr.dataset.trace); });
  text.addEventListener("pointerover", point);
  drawList();
  const first = rows.find(r => r[4]);
  if (first) show(first[0]);
})();
"""
