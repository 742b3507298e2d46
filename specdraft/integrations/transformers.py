"""A Drafter in Hugging Face transformers' assisted generation (`pip install 'specdraft[transformers]'`).

    from specdraft import Drafter
    from specdraft.integrations.transformers import generate

    drafter = Drafter.load("bundle")                       # `specdraft export --out bundle`
    result = generate(model, input_ids, drafter, max_new_tokens=200)
    result.sequences                                       # what model.generate returns
    result.forward_passes, result.accepted_tokens, result.accepted_per_pass

    generate(model, input_ids, drafter, verify_cost=drafter.verify_cost, ...)  # drafts cut to the length that pays

The model verifies each draft in one forward pass and keeps its longest agreeing prefix plus the
token it picks itself (transformers' `_assisted_decoding`), so greedy output equals
`model.generate(input_ids, do_sample=False)` token for token. With `do_sample=True` the rule is
transformers' for candidates without logits (as its prompt lookup): the model samples a token at
every draft position and the draft is kept up to the first disagreement.

How it plugs in. transformers (5.17, 5.24 and 5.25, as tested) has no public argument that takes a
CandidateGenerator: `generate()` builds one itself in `GenerationMixin._get_candidate_generator`,
from `assistant_model`, `prompt_lookup_num_tokens` and a few model-specific flags, and
`custom_generate=` hands over the whole decoding loop rather than the candidates. So `generate`
here asks for assisted generation the public way (`prompt_lookup_num_tokens`, which only switches
the mode) and, for that one call, shadows `_get_candidate_generator` on the model instance with a
function returning DrafterCandidateGenerator (`_candidates_from`, the one place that touches a
private name). If a transformers release stops calling it, `generate` raises instead of silently
decoding with prompt lookup, and tests/test_integrations_transformers.py fails.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import transformers
from transformers.generation import GenerationMixin
from transformers.generation.candidate_generator import CandidateGenerator

# generate() arguments that choose another candidate generator or decoding loop
CONFLICTING = ("assistant_model", "prompt_lookup_num_tokens", "custom_generate", "assistant_early_exit",
               "use_mtp", "speculation_type")
# Stopping rules assisted generation applies only after each verified draft, so that its output
# can run past where plain greedy stops (transformers' own comment: "we should technically crop
# based on other stopping criteria as well"); max_length and eos it crops at, and so does the drafter.
UNCROPPED_STOPS = ("stop_strings", "stopping_criteria")


class DrafterCandidateGenerator(CandidateGenerator):
    """Candidates from a Drafter session, for one generate call (batch size 1).

    get_candidates appends the session's draft to input_ids (no logits: the draft has none);
    update_candidate_strategy extends the session with what the call added since it last looked
    (the accepted draft tokens and the model's own token), so the session always holds exactly
    the sequence so far, whatever transformers cropped. A draft is cut so the sequence plus the
    model's token fits max_length, and before the first eos token (as prompt lookup does).

    A token id outside the bundle's vocabulary (e.g. a padded embedding row of the model) ends
    drafting for the call; decoding goes on one token per pass.

    verify_cost: each draft is the session's propose(verify_cost=verify_cost), cut to the length
    whose expected speedup is best at that cost (None: the full draft).
    """

    def __init__(self, drafter, input_ids: torch.LongTensor, max_length: int, eos_token_id=None,
                 verify_cost: float | None = None) -> None:
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"assisted generation takes one sequence at a time: input_ids has shape "
                             f"{tuple(input_ids.shape)}, expected (1, n)")
        self.vocab_size = drafter.vocab_size
        self.max_length = max_length
        eos = [] if eos_token_id is None else eos_token_id
        self.eos = {int(t) for t in (eos.tolist() if isinstance(eos, torch.Tensor) else
                                     [eos] if isinstance(eos, int) else eos)}
        self.draft_len = drafter.draft_len
        self.verify_cost = None if verify_cost is None else drafter.checked_verify_cost(verify_cost)
        self.prompt_len = input_ids.shape[1]
        self.forward_passes = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.stopped: str | None = None  # why drafting ended early, if it did
        prompt = input_ids[0].tolist()
        self.session = drafter.start(prompt) if self._in_vocab(prompt, "the prompt") else None
        self.seen = len(prompt)  # tokens of the sequence the session holds

    @property
    def num_drafting_tokens(self) -> int:
        """The most tokens a draft has (transformers 5.25 sizes the cache's rollback record by it)."""
        return self.draft_len

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs) -> tuple[torch.LongTensor, None]:
        self._catch_up(input_ids)
        self.forward_passes += 1
        room = self.max_length - input_ids.shape[1] - 1  # the model adds one token of its own
        draft = []
        if self.session is not None and room > 0:
            draft = self.session.propose(verify_cost=self.verify_cost)[:room]
        for i, token in enumerate(draft):
            if token in self.eos:
                draft = draft[:i]
                break
        self.drafted_tokens += len(draft)
        if not draft:
            return input_ids, None
        tail = torch.tensor([draft], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat((input_ids, tail), dim=1), None

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores, num_matches: int) -> None:
        self.accepted_tokens += int(num_matches)
        self._catch_up(input_ids)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def _catch_up(self, input_ids: torch.LongTensor) -> None:
        """Extend the session by the tokens of input_ids it has not seen."""
        n = input_ids.shape[1]
        if n < self.seen:
            raise RuntimeError(f"input_ids went back from {self.seen} to {n} tokens: assisted generation "
                               "only ever appends, so the drafter cannot follow")
        if n > self.seen and self.session is not None:
            new = input_ids[0, self.seen :].tolist()
            if self._in_vocab(new, "the model"):
                self.session.extend(new)
            else:
                self.close()
        self.seen = n

    def _in_vocab(self, ids: list[int], who: str) -> bool:
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            self.stopped = (f"{who} has token id {bad}, outside the bundle's vocabulary "
                            f"(0 to {self.vocab_size - 1}): no drafts from there on")
        return bad is None


@dataclass
class Generation:
    """What `generate` returns: the model's output and the drafting it took."""

    output: Any  # what model.generate returned: a LongTensor, or a ModelOutput if return_dict_in_generate
    prompt_len: int
    forward_passes: int  # one per verification (the first also reads the prompt)
    drafted_tokens: int  # draft tokens the model checked
    accepted_tokens: int  # of those, the ones it kept
    stopped: str | None = None  # why drafting ended early, if it did

    @property
    def sequences(self) -> torch.LongTensor:
        """The prompt and the new tokens, shape (1, n), as model.generate returns them."""
        return self.output if isinstance(self.output, torch.Tensor) else self.output.sequences

    @property
    def new_tokens(self) -> int:
        return self.sequences.shape[1] - self.prompt_len

    @property
    def accepted_per_pass(self) -> float:
        """Draft tokens kept per forward pass (plain decoding: 0)."""
        return self.accepted_tokens / self.forward_passes if self.forward_passes else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per forward pass (plain decoding: 1)."""
        return self.new_tokens / self.forward_passes if self.forward_passes else 0.0


def generate(model, input_ids: torch.LongTensor, drafter, verify_cost: float | None = None,
             **generate_kwargs) -> Generation:
    """model.generate(input_ids, **generate_kwargs) as assisted generation with `drafter`'s drafts.

    input_ids has shape (1, n) (assisted generation is one sequence at a time) and ids of the
    bundle's tokenizer; generate_kwargs are model.generate's (max_new_tokens, do_sample,
    attention_mask, streamer, ...), except those choosing another assistant or beam search.
    verify_cost: what verifying one drafted token costs, as a fraction of a forward pass; each
    draft is then cut to the length whose expected speedup is best at that cost, as the run's
    draft-length report measured it (`drafter.verify_cost` is the run's --verify-cost; --preset
    default bundles only). None (the default): the full drafts, which replay checks.
    """
    for name in CONFLICTING:
        if generate_kwargs.get(name) is not None:
            raise ValueError(f"generate(..., {name}=...) chooses another assistant; the drafter is the assistant here")
    if (generate_kwargs.get("num_beams") or 1) > 1:
        raise ValueError("assisted generation does not do beam search: leave num_beams at 1")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:  # (else an IndexError deep in generate)
        shown = f"shape {tuple(input_ids.shape)}" if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a LongTensor of shape (1, n), as model.generate takes it; got {shown}")
    for name in UNCROPPED_STOPS:
        if generate_kwargs.get(name):
            raise ValueError(f"generate(..., {name}=...): assisted generation checks it only after each verified "
                             "draft, so the output could run past where plain greedy stops; stop on the output "
                             "instead (max_new_tokens and eos_token_id are exact)")
    check_vocabulary(model, drafter)
    if verify_cost is not None:
        verify_cost = drafter.checked_verify_cost(verify_cost)  # before the model runs
    made: list[DrafterCandidateGenerator] = []

    def candidate_generator(*args, generation_config=None, input_ids=None, **kwargs) -> DrafterCandidateGenerator:
        if args or generation_config is None or input_ids is None:
            raise RuntimeError(_CHANGED + " (it calls _get_candidate_generator with other arguments)")
        made.append(DrafterCandidateGenerator(drafter, input_ids, generation_config.max_length,
                                              generation_config.eos_token_id, verify_cost))
        return made[-1]

    with _candidates_from(model, candidate_generator):
        try:
            output = model.generate(input_ids, prompt_lookup_num_tokens=drafter.draft_len, **generate_kwargs)
        finally:
            for generator in made:
                generator.close()
    if len(made) != 1:
        raise RuntimeError(_CHANGED + f" (generate asked for {len(made)} candidate generators, not 1)")
    used = made[0]
    return Generation(output, input_ids.shape[1], used.forward_passes, used.drafted_tokens, used.accepted_tokens,
                      used.stopped)


def check_vocabulary(model, drafter) -> None:
    """The model must read every id the drafter may propose: a smaller embedding than the bundle's
    vocabulary failed inside torch (IndexError in F.embedding) at the first draft past it."""
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if rows is not None and rows < drafter.vocab_size:
        raise ValueError(f"the model reads {rows} token ids and the bundle's tokenizer ({drafter.tokenizer.name}) "
                         f"has {drafter.vocab_size}: its drafts may hold ids the model has no embedding for; use a "
                         "model of the bundle's vocabulary")


_CHANGED = (f"transformers {transformers.__version__} no longer picks assisted generation's candidates through "
            "GenerationMixin._get_candidate_generator; specdraft.integrations.transformers needs updating")


@contextlib.contextmanager
def _candidates_from(model, candidate_generator):
    """For the block, the model's assisted generation takes its candidates from
    `candidate_generator(**the arguments of _get_candidate_generator)`: an instance attribute
    shadows GenerationMixin's method. The only use of transformers' private API here."""
    if not isinstance(model, GenerationMixin):
        raise TypeError(f"{type(model).__name__} is not a transformers model that generates (GenerationMixin)")
    if not hasattr(GenerationMixin, "_get_candidate_generator"):
        raise RuntimeError(_CHANGED + " (GenerationMixin has no _get_candidate_generator)")
    if "_get_candidate_generator" in vars(model):
        raise RuntimeError(f"this {type(model).__name__} is already generating with a drafter (one call at a time)")
    model._get_candidate_generator = candidate_generator
    try:
        yield
    finally:
        del model._get_candidate_generator
