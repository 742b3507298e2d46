"""The live drafter inside the engines people generate with. Each integration is an optional extra
and imports its engine only when imported itself (`import specdraft` never imports torch):

- transformers.py: a CandidateGenerator over a Drafter session and `generate(model, input_ids,
  drafter)`, Hugging Face transformers' assisted generation (`pip install 'specdraft[transformers]'`);
- generate.py: the `specdraft generate` command's stage, a model and its tokenizer loaded with
  transformers, the prompt generated with and without the drafter;
- vllm.py: the drafter as vLLM's `custom_class` speculative proposer (vLLM is never imported);
- sglang.py: a run's train traces as SGLang's NGRAM external corpus (`specdraft export --format
  sglang-corpus`).

Reads a drafter bundle through `specdraft.Drafter` only (specdraft/live); nothing earlier imports it.
Each can cut drafts to the length that pays at a verify cost (Session.propose(verify_cost=...)):
generate's `verify_cost`, `specdraft generate --verify-cost`, vLLM's $SPECDRAFT_VERIFY_COST.
"""

import re

from specdraft.config import MAX_VERIFY_COST

RUN_COST = "run"  # a verify cost setting that names the bundle's run's --verify-cost
# a plain decimal number, as typed (float() would also take "1_0", "-0", "inf" and other digits)
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def verify_cost_setting(text: str, drafter) -> float:
    """A verify cost given as text (an environment variable, a command's option): a number from 0
    to 10, or "run" for the --verify-cost of the bundle's run (drafter.verify_cost); a ValueError
    naming what is wrong, also for a bundle whose drafts cannot be cut (--preset seed).

    >>> class Bundle: verify_cost = 0.02; checked_verify_cost = staticmethod(float)
    >>> verify_cost_setting(" run ", Bundle()), verify_cost_setting("0.05", Bundle()), verify_cost_setting("1e-3", Bundle())
    (0.02, 0.05, 0.001)
    >>> verify_cost_setting("-0", Bundle())
    Traceback (most recent call last):
    ...
    ValueError: a verify cost is a number from 0 to 10 or 'run' (the bundle's run's --verify-cost), not '-0'
    """
    text = text.strip()
    if text.lower() == RUN_COST:
        return drafter.checked_verify_cost(drafter.verify_cost)
    if not _NUMBER.fullmatch(text) or not 0 <= float(text) <= MAX_VERIFY_COST:
        raise ValueError(f"a verify cost is a number from 0 to {MAX_VERIFY_COST} or {RUN_COST!r} (the bundle's "
                         f"run's --verify-cost), not {text!r}")
    return drafter.checked_verify_cost(float(text))
