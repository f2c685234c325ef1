"""A GPT-2 style byte-level BPE tokenizer built from a GGUF file's vocabulary.

Encoding: special tokens (GGUF token type control / user-defined) are matched verbatim
first; the rest is pre-split like the Hugging Face ``Digits(individual) + ByteLevel`` chain
(every digit alone, then the GPT-2 pattern), each piece is mapped byte -> printable unicode
and merged by BPE rank.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_NORMAL, _CONTROL, _USER_DEFINED = 1, 3, 4


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _kind(c: str) -> str:
    """'L' letter, 'N' number, 'S' whitespace, 'O' anything else (as the GPT-2 regex sees it)."""
    if c.isspace():
        return "S"
    cat = unicodedata.category(c)[0]
    return cat if cat in "LN" else "O"


def gpt2_split(text: str) -> list[str]:
    r"""Pieces of the pattern ``'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
    \s+(?!\S)|\s+``, written out by hand (the stdlib ``re`` has no ``\p{..}``)."""
    out, i, n = [], 0, len(text)
    kinds = [_kind(c) for c in text]
    while i < n:
        c = text[i]
        if c == "'":
            hit = next((s for s in _CONTRACTIONS if text.startswith(s, i)), None)
            if hit:
                out.append(hit)
                i += len(hit)
                continue
        start = i
        if c == " " and i + 1 < n and kinds[i + 1] != "S":
            i += 1  # optional leading space of a word, number or punctuation run
        k = kinds[i]
        if k != "S":
            while i < n and kinds[i] == k:
                i += 1
            out.append(text[start:i])
            continue
        j = i
        while j < n and kinds[j] == "S":
            j += 1
        # \s+(?!\S): leave the last space for the next token when more text follows
        if j < n and j - i > 1:
            j -= 1
        out.append(text[i:j])
        i = j
    return out


def pre_tokenize(text: str) -> list[str]:
    """Every numeric character alone, then the GPT-2 split of what is between."""
    out: list[str] = []
    run = 0
    for i, c in enumerate(text):
        if unicodedata.category(c)[0] == "N":
            if run < i:
                out += gpt2_split(text[run:i])
            out.append(c)
            run = i + 1
    if run < len(text):
        out += gpt2_split(text[run:])
    return out


class Tokenizer:
    """Byte-level BPE over ``tokens`` (byte-mapped strings) with ``merges`` ("a b", by rank)."""

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int] | None = None,
                 *, bos_id: int | None = None, eos_id: int | None = None):
        self.tokens = tokens
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        types = token_types or [_NORMAL] * len(tokens)
        self.special_ids = {i for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)}
        specials = sorted((tokens[i] for i in self.special_ids), key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, specials))) if specials else None
        self.bos_id, self.eos_id = bos_id, eos_id
        self._b2u = bytes_to_unicode()
        self._u2b = {u: b for b, u in self._b2u.items()}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        from engine.weights import gguf_field, open_gguf

        r = open_gguf(str(path))
        model = gguf_field(r, "tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"only byte-level BPE ('gpt2') vocabularies work, not {model!r}")
        return cls(
            list(gguf_field(r, "tokenizer.ggml.tokens")),
            list(gguf_field(r, "tokenizer.ggml.merges", [])),
            list(gguf_field(r, "tokenizer.ggml.token_type", [])) or None,
            bos_id=gguf_field(r, "tokenizer.ggml.bos_token_id"),
            eos_id=gguf_field(r, "tokenizer.ggml.eos_token_id"),
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def _bpe(self, piece: str) -> list[int]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        parts = list(piece)
        while len(parts) > 1:
            pairs = [(self.ranks.get(p, 1 << 62), k) for k, p in enumerate(pairwise(parts))]
            rank, k = min(pairs)
            if rank == 1 << 62:
                break
            a, b = parts[k], parts[k + 1]
            merged, i = [], 0  # merge every occurrence of this pair, left to right
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.vocab[p] for p in parts]
        self._cache[piece] = ids
        return ids

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in pre_tokenize(text):
            mapped = "".join(self._b2u[b] for b in piece.encode("utf-8"))
            ids += self._bpe(mapped)
        return ids

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; special tokens written in the text become their ids."""
        ids = [self.bos_id] if add_bos and self.bos_id is not None else []
        pos = 0
        if self._special_re is not None:
            for m in self._special_re.finditer(text):
                ids += self._encode_plain(text[pos:m.start()])
                ids.append(self.vocab[m.group()])
                pos = m.end()
        return ids + self._encode_plain(text[pos:])

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        out, buf = [], bytearray()
        for i in map(int, ids):
            if i in self.special_ids:
                out.append(buf.decode("utf-8", errors="replace"))
                buf.clear()
                if not skip_special:
                    out.append(self.tokens[i])
                continue
            buf += bytes(self._u2b[c] for c in self.tokens[i])
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """ChatML prompt (SmolLM2-Instruct's template) asking the assistant to reply."""
        msgs = [("system", system)] if system else []
        msgs.append(("user", user))
        body = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in msgs)
        return body + "<|im_start|>assistant\n"
