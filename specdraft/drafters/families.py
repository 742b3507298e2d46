"""Every source family a draft can come from, named once: the candidates SQL, both policies, the
evaluation and the reports read this registry.

A family's place in FAMILIES is its order: the seed's four sources first, in the seed's candidate
order (it breaks the seed policy's ties: candidates_for() lists copy, prompt autocomplete,
backoff, n-gram), then the sources beyond the seed. The same index is the family's code among the
confidence model's features.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Family:
    name: str
    seed: bool  # one of the seed's four sources (all that --preset seed proposes)
    selectable: bool  # the confidence policy may choose its drafts; else they are evidence only
    about: str
    # its drafts are scored by the confidence model (fitted on them) and branch the token trees
    # and multi-draft proposals; every selectable family is
    in_trees: bool = True


FAMILIES = (
    Family("copy", True, True, "the latest earlier match of the last 4..128 tokens, 16 known tokens after it"),
    Family("prompt-autocomplete", True, True, "the current line's last segment completed from the prompt"),
    Family("backoff", True, True, "16 greedy steps of the longest matching context's likeliest next token"),
    # The seed's longest-only n-gram is the same draft as ngram-all's at the longest length.
    Family("ngram", True, False, "the likeliest continuation of the longest matching context", in_trees=False),
    Family("recent-copy", False, True, "what followed the latest same-context place in the trace, repeated"),
    # Choosing among these too made the picks worse (2.401 against 2.410 on the development set).
    # In the token trees they pay: the best of every tree family's drafts is 3.038 against 2.789
    # for the selectable ones', and tree_b64 rose from 2.785 to 2.998.
    Family("recent-copy-2", False, False, "the second-latest same-context place (agreement evidence)"),
    Family("ngram-all", False, True, "the likeliest continuation at every context length that hits"),
    Family("ngram-rank2", False, False, "the second continuation (agreement evidence)"),
    Family("online", False, True, "continuations of traces already served (--online)"),
    Family("arithmetic", False, True, "the result of the calculation the text has just written out"),
)
NAMES = tuple(family.name for family in FAMILIES)
ORDER = {name: order for order, name in enumerate(NAMES)}
SEED = tuple(family.name for family in FAMILIES if family.seed)
SELECTABLE = tuple(family.name for family in FAMILIES if family.selectable)
IN_TREES = tuple(family.name for family in FAMILIES if family.in_trees)
assert set(SELECTABLE) <= set(IN_TREES)


def order_table() -> pa.Table:
    """family -> family_order, for the candidates SQL (registered as `source_families`).

    >>> order_table().to_pydict()["family_order"][:4]
    [0, 1, 2, 3]
    """
    return pa.table({"family": list(NAMES), "family_order": pa.array(range(len(NAMES)), pa.int32())})
