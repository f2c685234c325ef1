"""Byte-level BPE: the pre-tokenizer against the GPT-2 regex, merges, specials, round trips."""

from __future__ import annotations

import random
import re

from engine.tokenizer import Tokenizer, bytes_to_unicode, gpt2_split, pre_tokenize

# The GPT-2 pattern with \p{L} / \p{N} spelled for ASCII, which the stdlib ``re`` can run.
ASCII_GPT2 = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+"
                        r"|\s+(?!\S)|\s+")


def test_split_matches_the_gpt2_regex_on_ascii():
    rng = random.Random(0)
    alphabet = "ab Z9 0'.,!?\n\t-_s tdmlrev"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        assert gpt2_split(text) == ASCII_GPT2.findall(text), repr(text)


def test_unicode_letters_and_digits():
    assert gpt2_split("héllo wörld") == ["héllo", " wörld"]
    assert pre_tokenize("abc 2024!") == ["abc", " ", "2", "0", "2", "4", "!"]
    assert pre_tokenize("x²") == ["x", "²"]  # ² is a number (No), split alone


def _toy() -> Tokenizer:
    b2u = bytes_to_unicode()
    base = [b2u[b] for b in range(256)]
    merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"]
    words = ["he", "ll", "hell", "hello", "Ġw", "Ġwo"]
    return Tokenizer(["<eos>", *base, *words], merges, [3] + [1] * (256 + len(words)), eos_id=0)


def test_bpe_merges_by_rank_and_round_trips():
    tok = _toy()
    ids = tok.encode("hello world")
    assert [tok.tokens[i] for i in ids] == ["hello", "Ġwo", "r", "l", "d"]
    assert tok.decode(ids) == "hello world"
    text = "naïve 🙂<eos>hello"
    ids = tok.encode(text)
    assert ids[-2] == 0 and tok.decode(ids) == text
    assert tok.decode(ids, skip_special=True) == "naïve 🙂hello"


def test_smollm2_vocabulary(smollm2):
    _, tok = smollm2
    ids = tok.encode("The capital of France is")
    assert ids == [504, 3575, 282, 4649, 314]  # as the HF tokenizer gives
    assert [tok.decode([i]) for i in ids] == ["The", " capital", " of", " France", " is"]
    assert tok.encode("<|im_start|>user\nHi<|im_end|>")[0] == 1
    assert tok.eos_id == 2 and tok.decode([2]) == "<|im_end|>"
    for text in ["What is 2+2?", "  spaces\n\n\tand tabs ", "日本語 🙂 naïve café", "don't"]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("12345")) == 5  # digits one by one
