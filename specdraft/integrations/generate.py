"""`specdraft generate`: a model and its tokenizer loaded with transformers (a local directory or a
hub id), one prompt generated greedily with the drafter and without it, and what that took.

The prompt's ids come from the model's tokenizer when it has one (a hub repo, or a directory with
tokenizer.json / tokenizer_config.json); a directory without one (weights saved alone with
save_pretrained) uses the bundle's tokenizer, the vocabulary the drafter's ids are in. If the
model's tokenizer encodes the prompt otherwise than the bundle's, the drafts are of another
vocabulary (still lossless, rarely accepted) and a warning says so.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdraft.errors import SpecdraftError, first_line

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class TextTokenizer:
    """Text <-> ids for the command: the model's tokenizer or the bundle's (`source` says which)."""

    source: str
    encode: Any  # (str, templated: bool) -> list[int]; a templated prompt has its special tokens already
    decode: Any  # list[int] -> str
    chat: Any = None  # str -> the prompt in the model's chat template, if it has one


def run_generate(model_name: str, bundle: Path, prompt: str, *, max_new_tokens: int = 200,
                 device: str | None = None, dtype: str = "auto", chat: bool = False,
                 baseline: bool = True, verify_cost: str | None = None) -> dict:
    """Generate `prompt`'s continuation greedily with the drafter (and, with baseline, without it).

    Returns the text and the measurements: new tokens, forward passes, draft tokens accepted, wall
    seconds of each run and whether the two outputs are the same tokens. Each run is timed after
    one short warm-up generate, so neither pays the first call's setup. verify_cost: drafts cut
    to the length that pays at that cost (integrations.verify_cost_setting: a number, or "run").
    """
    try:
        import torch

        from specdraft.integrations.transformers import check_vocabulary, generate
    except ImportError as exc:
        raise SpecdraftError(f"specdraft generate needs torch and transformers ({first_line(exc)}): "
                             "pip install 'specdraft[transformers]'") from exc
    from specdraft import Drafter
    from specdraft.integrations import verify_cost_setting

    drafter = Drafter.load(bundle)
    cost = None
    if verify_cost is not None:
        try:
            cost = verify_cost_setting(verify_cost, drafter)
        except ValueError as exc:
            raise SpecdraftError(f"--verify-cost: {exc}") from None
    model = load_model(model_name, device, dtype)
    tokenizer = load_text_tokenizer(model_name, drafter)
    if chat:
        if tokenizer.chat is None:
            raise SpecdraftError(f"--chat: {tokenizer.source} has no chat template")
        prompt = tokenizer.chat(prompt)
    ids = tokenizer.encode(prompt, chat)
    if not ids:
        raise SpecdraftError("the prompt is empty: it encodes to no tokens")
    warnings = []
    if tokenizer.source != "the bundle's tokenizer" and ids != drafter.tokenizer.encode(prompt):
        warnings.append(f"{tokenizer.source} encodes the prompt otherwise than the bundle's tokenizer "
                        f"({drafter.tokenizer.name}): the drafts are in another vocabulary and will rarely be kept")
    input_ids = torch.tensor([ids], device=model.device)
    settings = {"do_sample": False, "max_new_tokens": max_new_tokens}
    if model.generation_config.pad_token_id is None and model.generation_config.eos_token_id is not None:
        eos = model.generation_config.eos_token_id
        settings["pad_token_id"] = eos if isinstance(eos, int) else eos[0]  # batch size 1: no padding anyway

    try:
        check_vocabulary(model, drafter)
    except ValueError as exc:
        raise SpecdraftError(str(exc)) from None
    model.generate(input_ids, **{**settings, "max_new_tokens": 2})  # warm-up
    start = time.perf_counter()
    result = generate(model, input_ids, drafter, verify_cost=cost, **settings)
    drafted_s = time.perf_counter() - start
    new = result.sequences[0, len(ids) :].tolist()
    if result.stopped:
        warnings.append(result.stopped)
    out = {
        "text": tokenizer.decode(new),
        "tokenizer": tokenizer.source,
        "prompt_tokens": len(ids),
        "new_tokens": len(new),
        "forward_passes": result.forward_passes,
        "drafted_tokens": result.drafted_tokens,
        "accepted_tokens": result.accepted_tokens,
        "accepted_per_pass": result.accepted_per_pass,
        "tokens_per_pass": result.tokens_per_pass,
        "drafter_s": drafted_s,
        "verify_cost": cost,
        "warnings": warnings,
    }
    if baseline:
        start = time.perf_counter()
        plain = model.generate(input_ids, **settings)
        out["plain_s"] = time.perf_counter() - start
        out["plain_new_tokens"] = out["plain_forward_passes"] = plain.shape[1] - len(ids)  # one pass a token
        out["identical"] = plain[0, len(ids) :].tolist() == new
        if not out["identical"]:
            warnings.append("the outputs with and without the drafter differ (numerics of a batched forward "
                            "pass, e.g. half precision on a GPU; in float32 they should not)")
    return out


def format_stats(out: dict) -> list[str]:
    """The lines `specdraft generate` prints on stderr."""
    lines = [
        f"prompt: {out['prompt_tokens']} tokens ({out['tokenizer']})",
        (f"with the drafter:    {out['new_tokens']} new tokens in {out['forward_passes']} forward passes, "
         f"{out['accepted_per_pass']:.2f} accepted tokens per pass ({out['accepted_tokens']} of "
         f"{out['drafted_tokens']} drafted{_cut(out)}), {out['tokens_per_pass']:.2f} tokens per pass, "
         f"{out['drafter_s']:.2f} s"),
    ]
    if "plain_s" in out:
        ratio = out["plain_s"] / out["drafter_s"] if out["drafter_s"] else float("nan")
        lines.append(f"without the drafter: {out['plain_new_tokens']} new tokens in {out['plain_forward_passes']} "
                     f"forward passes, {out['plain_s']:.2f} s; speedup {ratio:.2f}x, "
                     f"outputs {'identical' if out['identical'] else 'DIFFERENT'}")
    return lines + [f"warning: {w}" for w in out["warnings"]]


def _cut(out: dict) -> str:
    cost = out.get("verify_cost")
    return "" if cost is None else f", cut at verify cost {cost:g}"


def load_model(name: str, device: str | None, dtype: str):
    """AutoModelForCausalLM from a local directory or a hub id (from the local cache when the hub
    cannot be reached); one line if neither works."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise SpecdraftError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if not sys.stderr.isatty():  # progress bars only on a terminal, as specdraft's own
        from transformers.utils import logging

        logging.disable_progress_bar()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    local = os.path.exists(name)
    offline = not local and not _hub_reachable()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype if dtype == "auto" else getattr(torch, dtype), local_files_only=offline)
    except (OSError, ValueError) as exc:
        if local:
            where = f"{name}: not a model directory transformers can load"
        elif _looks_like_path(name):
            where = f"{name}: no such directory"
        elif offline:
            where = (f"cannot load model {name!r}: the Hugging Face hub cannot be reached and it is not in the "
                     "local cache; pass --model a directory with the weights (save_pretrained)")
        else:
            where = f"cannot load model {name!r} from the Hugging Face hub"
        raise SpecdraftError(f"{where} ({first_line(exc)})") from exc
    try:
        return model.to(device).eval()
    except (RuntimeError, AssertionError) as exc:
        raise SpecdraftError(f"--device {device}: {first_line(exc)}") from exc


def load_text_tokenizer(name: str, drafter) -> TextTokenizer:
    """The model's tokenizer (AutoTokenizer) if it has one, else the bundle's (see the module docstring)."""
    local = os.path.isdir(name)
    if local and not any((Path(name) / f).exists() for f in TOKENIZER_FILES):
        bundled = drafter.tokenizer
        return TextTokenizer("the bundle's tokenizer", lambda text, templated: bundled.encode(text), bundled.decode)
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(name, local_files_only=not local and not _hub_reachable())
    except (OSError, ValueError) as exc:
        raise SpecdraftError(f"cannot load the tokenizer of {name!r} ({first_line(exc)})") from exc

    def encode(text: str, templated: bool) -> list[int]:
        return list(hf.encode(text, add_special_tokens=not templated))

    def decode(ids: list[int]) -> str:
        return hf.decode(ids, skip_special_tokens=True)

    def chat(text: str) -> str:
        return hf.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                      add_generation_prompt=True)

    return TextTokenizer(f"the tokenizer of {name}", encode, decode, chat if hf.chat_template else None)


def _hub_reachable() -> bool:
    from specdraft.sources.ingest import _hub_reachable as reachable  # the check `run` makes for datasets

    return reachable()


def _looks_like_path(name: str) -> bool:
    from specdraft.sources.tokenizer import _looks_like_path as looks

    return looks(name)
