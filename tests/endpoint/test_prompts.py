import numpy as np
import pytest

from endpoint.prompts import PromptBuilder, word_vocab
from sim.errors import InputError


def test_word_tokens_encode_to_themselves(tokenizer_json):
    import json

    from engine.tokenizer import Tokenizer

    v = word_vocab(tokenizer_json)
    assert len(v.ids) >= 64
    model = json.loads(tokenizer_json.read_text())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    tok = Tokenizer(tokens, model["merges"])
    b = PromptBuilder(v, 16, seed=1)
    ids = b.prompt(3, 57)
    assert len(ids) == 57
    assert tok.encode(b.text(ids)) == list(ids)  # the text form has exactly these tokens


def test_shared_blocks_share_tokens_and_nothing_else(tokenizer_json):
    b = PromptBuilder(word_vocab(tokenizer_json), 16, seed=0)
    p1 = b.prompt(0, 60, np.array([11, 12, 13]))
    p2 = b.prompt(1, 70, np.array([11, 12, 99]))
    p3 = b.prompt(2, 40, None)
    assert len(p1) == 60 and len(p2) == 70
    assert (p1[:32] == p2[:32]).all()  # blocks 11, 12 shared
    assert (p1[32:48] != p2[32:48]).any()  # block 13 vs 99
    assert (p1[:16] != p3[:16]).any()
    # a prompt shorter than its shareable blocks keeps its exact length
    assert len(b.prompt(4, 20, np.array([11, 12, 13]))) == 20
    assert (b.prompt(0, 60, np.array([11, 12, 13])) == p1).all()  # deterministic


def test_bad_tokenizer_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"tokenizer\.json"):
        word_vocab(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match=r"not a Hugging Face tokenizer\.json"):
        word_vocab(tmp_path)
