"""Fixtures: a small byte-level BPE tokenizer.json whose words build by merges, a fake server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.endpoint.fake_server import FakeServer


def _byte_chars() -> list[str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def make_tokenizer_json(path, words: int = 200, seed: int = 0):
    """Bytes, then each word ``Ġxyz`` built by left-to-right merges (``Ġ x``, ``Ġx y``, ...)."""
    rng = np.random.default_rng(seed)
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    merges: list[str] = []
    letters = "abcdefghijklmnopqrstuvwxyz"
    made = 0
    while made < words:
        w = "".join(rng.choice(list(letters), int(rng.integers(3, 7))))
        piece = "Ġ"
        for ch in w:
            m = f"{piece} {ch}"
            piece += ch
            if piece not in vocab:
                vocab[piece] = len(vocab)
                merges.append(m)
        made += 1
    data = {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory):
    return make_tokenizer_json(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture()
def fake_server(tokenizer_json):
    with FakeServer(root=str(tokenizer_json.parent)) as url:
        yield url
