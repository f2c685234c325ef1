"""Prompts of exact token counts, as token ids or as text that tokenizes to exactly those ids.

A prompt is built from *word tokens*: vocabulary entries that are a space followed by
lowercase ASCII letters (``Ġhello`` in a byte-level BPE vocabulary) and that the tokenizer
encodes back to themselves. Any sequence of them tokenizes to exactly one token each (the
pre-tokenizer splits text at every ``" word"``), so the same prompt can be sent as token
ids (``/v1/completions``) or text (``/v1/chat/completions``) with a known length.

Shared prefixes follow the workload's prefix block ids (``Workload.block_ids``): a shareable
block's tokens are drawn from a generator seeded by its id, so two requests share exactly
the blocks the scenario says they share; the rest of each prompt is drawn per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import InputError

_SPACE = "Ġ"  # byte-level BPE's printable stand-in for a space


@dataclass(frozen=True)
class WordVocab:
    """Token ids that are one word each, with their text (a leading space, then letters)."""

    ids: np.ndarray  # int64
    texts: tuple[str, ...]
    source: str

    def text(self, ids) -> str:
        where = {int(i): k for k, i in enumerate(self.ids)}
        return "".join(self.texts[where[int(i)]] for i in ids)


def load_tokenizer_json(path: str | Path, field: str = "--tokenizer") -> tuple[dict[str, int], list]:
    """Vocabulary and merges of a Hugging Face ``tokenizer.json`` (a file or a model folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise InputError(field, str(path), "no tokenizer.json there (give a file or a model folder)")
    try:
        data = json.loads(p.read_text())
        model = data["model"]
        vocab, merges = dict(model["vocab"]), list(model.get("merges", []))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise InputError(field, str(p), f"not a Hugging Face tokenizer.json ({e})") from None
    if model.get("type") != "BPE":
        raise InputError(field, str(p), f"expected a BPE tokenizer, got {model.get('type')!r}")
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return vocab, merges


def word_vocab(path: str | Path, field: str = "--tokenizer", limit: int = 4096) -> WordVocab:
    """The word tokens of a byte-level BPE ``tokenizer.json``, each checked to encode to itself
    (with the ``tokenizers`` package when installed, else the repo's own BPE)."""
    vocab, merges = load_tokenizer_json(path, field)
    cand = sorted((i, t) for t, i in vocab.items()
                  if t.startswith(_SPACE) and 3 <= len(t) <= 9 and t[1:].isascii() and t[1:].isalpha()
                  and t[1:].islower())
    if not cand:
        raise InputError(field, str(path), "no word tokens (space + letters) in the vocabulary: "
                         "only byte-level BPE vocabularies are supported")
    encode = _encoder(path, vocab, merges)
    ids, texts = [], []
    for i, t in cand:
        text = " " + t[1:]
        if encode(text) == [i]:
            ids.append(i)
            texts.append(text)
            if len(ids) >= limit:
                break
    if len(ids) < 64:
        raise InputError(field, str(path), f"only {len(ids)} word tokens encode to themselves")
    return WordVocab(np.asarray(ids, dtype=np.int64), tuple(texts), str(path))


def _encoder(path, vocab: dict[str, int], merges: list[str]):
    try:
        from tokenizers import Tokenizer as HFTokenizer

        p = Path(path)
        tok = HFTokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))
        return lambda text: tok.encode(text, add_special_tokens=False).ids
    except ImportError:
        from engine.tokenizer import Tokenizer

        tokens = [""] * (max(vocab.values()) + 1)
        for t, i in vocab.items():
            tokens[i] = t
        return Tokenizer(tokens, merges).encode


class PromptBuilder:
    """Token-id prompts for a workload's requests, deterministic in ``seed``."""

    def __init__(self, vocab: WordVocab, block_size: int, seed: int = 0):
        self.vocab = vocab
        self.block_size = block_size
        self.seed = seed

    def _draw(self, key: tuple[int, ...], n: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, *key))
        return self.vocab.ids[rng.integers(0, len(self.vocab.ids), n)]

    def prompt(self, request: int, length: int, blocks: np.ndarray | None = None) -> np.ndarray:
        """``length`` ids; its first ``len(blocks)`` blocks from the shared block ids."""
        parts = []
        shared = 0
        if blocks is not None and len(blocks):
            nb = min(len(blocks), length // self.block_size)
            # block ids are non-negative int64 hashes; fold into the seed sequence (uint32s)
            for b in blocks[:nb]:
                b = int(b) & ((1 << 64) - 1)
                parts.append(self._draw((1, b >> 32, b & 0xFFFFFFFF), self.block_size))
            shared = nb * self.block_size
        parts.append(self._draw((0, request), length - shared))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def text(self, ids) -> str:
        return self.vocab.text(ids)
