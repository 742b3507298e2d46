"""A small pure-Python reference of the n-gram tables (Counter-based), written from the seed's
semantics: ContinuationIndex.add / prune and BackoffIndex.add, with their position caps."""

from __future__ import annotations

from collections import Counter, defaultdict


def selected(traces, max_completion_tokens):
    """(split, full token tuple) of traces kept as in build_examples (empty completions dropped)."""
    out = []
    for split, prompt, completion in traces:
        completion = completion[:max_completion_tokens] if max_completion_tokens else completion
        if completion:
            out.append((split, tuple(prompt) + tuple(completion), len(prompt)))
    return out


def queried_contexts(kept, lengths):
    """(length, context) of every calibration and eval position that has a context of that length:
    what exact_continuations ranks under --ngram-contexts queried. A position p sees tokens[:p], for
    p from 1 to len - 1 (the pipeline's positions: each one has a next token)."""
    return {
        (length, tokens[pos - length : pos])
        for split, tokens, _ in kept
        if split != "train"
        for length in lengths
        for pos in range(length, len(tokens))
    }


def exact_table(full_train, lengths, draft_len, max_positions, top_k):
    tables = {length: defaultdict(Counter) for length in lengths}
    added = 0
    for tokens in full_train:
        for pos in range(max(0, len(tokens) - draft_len)):
            if max_positions and added >= max_positions:
                break
            for length in lengths:
                if pos >= length:
                    tables[length][tokens[pos - length : pos]][tokens[pos : pos + draft_len]] += 1
            added += 1
    pruned = {
        (length, ctx): counter.most_common(top_k) for length, table in tables.items() for ctx, counter in table.items()
    }
    return pruned, added


def backoff_table(full_train, lengths, max_positions):
    tables = {length: defaultdict(Counter) for length in lengths}
    added = 0
    for tokens in full_train:
        for pos, token in enumerate(tokens):
            if max_positions and added >= max_positions:
                break
            for length in lengths:
                if pos >= length:
                    tables[length][tokens[pos - length : pos]][token] += 1
            added += 1
    return {(length, ctx): counter for length, table in tables.items() for ctx, counter in table.items()}, added


def backoff_draft(table, lengths, min_context_len, draft_len, context):
    """BackoffIndex.predict's walk over backoff_table(): (drafted tokens, context length of each step)."""
    working, drafted, step_lens = tuple(context), [], []
    for _ in range(draft_len):
        for length in sorted(lengths, reverse=True):
            if length < min_context_len or len(working) < length:
                continue
            counter = table.get((length, working[-length:]))
            if counter:
                token = counter.most_common(1)[0][0]
                drafted.append(token)
                step_lens.append(length)
                working += (token,)
                break
        else:
            break
    return drafted, step_lens
