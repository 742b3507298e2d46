"""One frozen dataclass holds a run's settings; its defaults are the seed's flags."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from specdraft.errors import SpecdraftError

SEED_CONTEXT_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SEED_BACKOFF_CONTEXT_LENGTHS = (4, 6, 8, 12, 16, 24, 32, 48)
# The seed hard-codes the prefix-copy lengths in candidates_for().
SEED_COPY_CONTEXT_LENGTHS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MAX_CONTEXT_LEN = 1024
PRESETS = ("default", "seed")


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


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a run. Defaults are the seed's (minimal_spec_decode.py) flags."""

    draft_len: int = 16
    max_completion_tokens: int = 512
    context_lengths: tuple[int, ...] = SEED_CONTEXT_LENGTHS
    backoff_context_lengths: tuple[int, ...] = SEED_BACKOFF_CONTEXT_LENGTHS
    backoff_min_context_len: int = 4
    copy_context_lengths: tuple[int, ...] = SEED_COPY_CONTEXT_LENGTHS
    max_index_positions: int = 4_000_000
    backoff_max_index_positions: int = 4_000_000
    max_continuations_per_context: int = 8
    policy_prior_strength: float = 200.0
    train_limit: int = 0
    calibration_limit: int = 0
    eval_limit: int = 0
    calibration_stride: int = 2
    calibration_max_positions: int = 256
    tokenizer: str = "Qwen/Qwen2.5-7B-Instruct"
    # "seed": the seed's four sources and source-average policy, exactly. "default": adds recent
    # copy and every-length n-gram drafts, chosen by a confidence model fitted on calibration.
    preset: str = "default"
    # The online scenario: traces of a split served in order, each added to the store after it is
    # scored (an extra "online" source). Reported separately; the headline stays offline.
    online: bool = False
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in ("context_lengths", "backoff_context_lengths", "copy_context_lengths"):
            object.__setattr__(self, name, parse_lengths(getattr(self, name)))
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
        if self.max_continuations_per_context < 1:
            raise SpecdraftError("--max-continuations-per-context must be >= 1")
        if self.policy_prior_strength < 0:
            raise SpecdraftError("--policy-prior-strength must be >= 0")
        if self.preset not in PRESETS:
            raise SpecdraftError(f"--preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.online and self.preset == "seed":
            raise SpecdraftError("--online needs --preset default")
        if self.calibration_stride < 1:
            raise SpecdraftError("calibration stride must be >= 1")

    @property
    def effective_backoff_lengths(self) -> tuple[int, ...]:
        """Backoff lengths the seed actually looks up (>= --backoff-min-context-len)."""
        return tuple(x for x in self.backoff_context_lengths if x >= self.backoff_min_context_len)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("extra")
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out

    def fingerprint(self, *fields: str) -> str:
        """A short stable hash of the named settings (all settings when none are named)."""
        data = self.to_dict()
        if fields:
            data = {name: data[name] for name in fields}
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
