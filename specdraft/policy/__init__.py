"""What every policy is: fitted on the calibration split, it scores drafts, evaluates itself on
the eval split and describes itself. A preset names one; the pipeline, the candidates stage
and the reports go through this interface only.

    seed     seed.SourceAveragePolicy        the seed's source averages, exactly
    default  confidence.ConfidencePolicy     gradient-boosted trees predicting each draft's accepted length
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

import numpy as np
import pyarrow as pa

from specdraft.errors import SpecdraftError

if TYPE_CHECKING:
    from specdraft.config import RunConfig
    from specdraft.policy.evaluate import Evaluation
    from specdraft.sources.tokenizer import Tokenizer
    from specdraft.warehouse.connection import Warehouse


class Policy(Protocol):
    # The source families whose drafts the preset builds (families.py), and whether it reads
    # their features (candidate_features.sql) rather than the drafts alone.
    families: ClassVar[tuple[str, ...]]
    reads_features: ClassVar[bool]
    # Whether the n-gram drafts each context's most supported path rather than its most frequent
    # continuation (sql/drafters/ngram_choices.sql).
    ngram_by_support: ClassVar[bool]
    # Whether prompt autocomplete reads its text from the tokens alone: the prompt as the decode of
    # its tokens (not the dataset's text, which a live caller may not have) and the current line
    # decoded whole (not chunk by chunk as the seed: drafters/autocomplete.py). Then a draft is
    # one function of the tokens before it, in the warehouse and live.
    text_from_tokens: ClassVar[bool]
    # Modules calibrate() imports that take a second or more to load (LightGBM: 1.2 s); the pipeline
    # imports them in a background thread while the earlier stages run.
    slow_imports: ClassVar[tuple[str, ...]]

    @classmethod
    def calibrate(cls, wh: Warehouse, cfg: RunConfig) -> Self:
        """Fit on the calibration split's drafts (the stage-5 tables)."""

    def score(self, drafts: pa.Table) -> np.ndarray:
        """One score per draft row, higher is better; at a position the first highest wins."""

    def evaluate(self, wh: Warehouse, cfg: RunConfig, tokenizer: Tokenizer, traces_path: Path) -> Evaluation:
        """Every position and decode step on the eval split."""

    def leave_one_out(self, wh: Warehouse, cfg: RunConfig, results: dict) -> dict:
        """Each selectable source's marginal contribution to the run's `selected` (a refit without it)."""

    def to_dict(self) -> dict:
        """What results.json records of the fitted policy."""

    def model_tables(self) -> dict[str, pa.Table]:
        """The fitted models too big for results.json, as tables the run records beside it, by the
        table they are recorded in (policy_trees, policy_chain_trees); none if to_dict() says it all."""


def policy_for(preset: str) -> type[Policy]:
    from specdraft.policy.confidence import ConfidencePolicy
    from specdraft.policy.seed import SourceAveragePolicy

    policies: dict[str, type[Policy]] = {"seed": SourceAveragePolicy, "default": ConfidencePolicy}
    if preset not in policies:
        raise SpecdraftError(f"unknown preset {preset!r}; presets: {', '.join(policies)}")
    return policies[preset]
