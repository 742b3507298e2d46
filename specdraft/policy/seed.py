"""Stage 6: the seed's SourceAveragePolicy, from acceptance that SQL has summed per source.

score(candidate) = source_avg[source] * 1000 + candidate.score * 0.0001, where source_avg is the
source's calibration mean shrunk toward the global mean by --policy-prior-strength pseudo-counts.
A source never seen in calibration scores the global mean. All float arithmetic repeats the seed's
operations in the seed's order, so the policy's choices match it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa

from specdraft.config import RunConfig
from specdraft.drafters import families
from specdraft.errors import SpecdraftError
from specdraft.sources.tokenizer import Tokenizer
from specdraft.warehouse.connection import Warehouse


@dataclass(frozen=True)
class SourceAveragePolicy:
    """The seed's policy (a policy.Policy): --preset seed."""

    families: ClassVar[tuple[str, ...]] = families.SEED
    reads_features: ClassVar[bool] = False
    ngram_by_support: ClassVar[bool] = False  # the seed's n-gram: Counter.most_common
    text_from_tokens: ClassVar[bool] = False  # the dataset's prompt text, the seed's TextCursor
    slow_imports: ClassVar[tuple[str, ...]] = ()

    global_avg: float
    source_avg: dict[str, float]
    calibration: dict[str, tuple[int, int]]  # source -> (positions, accepted_sum)

    @classmethod
    def from_sums(cls, sums: dict[str, tuple[int, int]], prior_strength: float) -> SourceAveragePolicy:
        total_n = sum(n for n, _ in sums.values())
        total_accepted = sum(s for _, s in sums.values())
        # statistics.mean of ints: the exact rational mean, rounded once.
        global_avg = float(Fraction(total_accepted, total_n)) if total_n else 0.0
        source_avg = {
            source: (accepted + global_avg * prior_strength) / (n + prior_strength)
            for source, (n, accepted) in sums.items()
        }
        return cls(global_avg, source_avg, dict(sums))

    def source_weights(self, sources: np.ndarray) -> np.ndarray:
        """source_avg * 1000 per candidate row."""
        unique, inverse = np.unique(sources, return_inverse=True)
        weights = np.array([self.source_avg.get(s, self.global_avg) * 1000.0 for s in unique.tolist()])
        return weights[inverse] if len(unique) else np.zeros(0)

    def scores(self, sources: np.ndarray, raw_scores: np.ndarray) -> np.ndarray:
        return self.source_weights(sources) + raw_scores * 0.0001

    def score_one(self, source: str, raw_score: float) -> float:
        return self.source_avg.get(source, self.global_avg) * 1000.0 + raw_score * 0.0001

    @classmethod
    def calibrate(cls, wh: Warehouse, cfg: RunConfig) -> SourceAveragePolicy:
        rows = wh.query("policy/source_acceptance").fetchall()
        sums = {source: (int(n), int(accepted)) for source, n, accepted in rows}
        return cls.from_sums(sums, cfg.policy_prior_strength)

    def score(self, drafts: pa.Table) -> np.ndarray:
        from specdraft.policy.evaluate import candidate_policy_scores

        return candidate_policy_scores(drafts, self)[0]

    def evaluate(self, wh: Warehouse, cfg: RunConfig, tokenizer: Tokenizer, traces_path: Path):
        from specdraft.policy.evaluate import evaluate

        return evaluate(wh, cfg, tokenizer, traces_path, self)

    def leave_one_out(self, wh: Warehouse, cfg: RunConfig, results: dict) -> dict:
        raise SpecdraftError("--leave-one-out needs --preset default (the seed's policy has no refit)")

    def model_tables(self) -> dict:
        return {}  # to_dict() holds the whole policy

    @classmethod
    def from_dict(cls, data: dict) -> SourceAveragePolicy:
        """The policy to_dict() recorded (results.json's policy, a bundle's policy.json)."""
        calibration = {s: (int(v["positions"]), int(v["accepted_sum"])) for s, v in data["calibration"].items()}
        source_avg = {str(s): float(v) for s, v in data["source_avg"].items()}
        return cls(float(data["global_avg"]), source_avg, calibration)

    def to_dict(self) -> dict:
        return {
            "global_avg": self.global_avg,
            "source_avg": dict(sorted(self.source_avg.items())),
            "calibration": {s: {"positions": n, "accepted_sum": a} for s, (n, a) in sorted(self.calibration.items())},
        }

