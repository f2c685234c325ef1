"""The graph ladder: which padded bucket a step runs in, or none (eager)."""

from __future__ import annotations

import pytest

from engine.buckets import Bucket, GraphLadder, default_sizes


def test_default_ladder_like_production_engines():
    sizes = default_sizes(256, 512)
    assert sizes[:5] == (1, 2, 4, 8, 16)
    assert [s for s in sizes if 8 <= s <= 256] == list(range(8, 257, 8))  # every decode batch step
    assert [s for s in sizes if s > 256] == [320, 384, 448, 512]  # mixed steps
    ladder = GraphLadder.build(256, 512)
    assert all(b.seqs == b.tokens for b in ladder.buckets if b.tokens <= 256)
    assert all(b.seqs == 256 for b in ladder.buckets if b.tokens > 256)
    assert ladder.largest == Bucket(512, 256)
    small = default_sizes(8, 64)
    assert small == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert default_sizes(5, 20)[-1] == 20 and 5 in default_sizes(5, 20)


@pytest.mark.parametrize("seqs,tokens,want", [
    (1, 1, Bucket(1, 1)), (3, 3, Bucket(4, 4)), (5, 5, Bucket(8, 8)), (8, 8, Bucket(8, 8)),
    (9, 9, None),  # more rows than any graph holds: eager
    (2, 7, Bucket(8, 8)), (3, 30, Bucket(32, 8)), (8, 64, Bucket(64, 8)),
    (1, 65, None),  # more tokens than the largest bucket: eager
])
def test_smallest_bucket_that_holds_the_step(seqs, tokens, want):
    ladder = GraphLadder.build(max_seqs=8, max_tokens=64)
    assert ladder.bucket_for(seqs, tokens) == want


def test_every_step_that_fits_gets_the_smallest_fitting_bucket():
    ladder = GraphLadder.build(max_seqs=16, max_tokens=96)
    for seqs in range(1, 20):
        for tokens in range(seqs, 110):
            b = ladder.bucket_for(seqs, tokens)
            fitting = [x for x in ladder.buckets if x.tokens >= tokens and x.seqs >= seqs]
            assert b == (min(fitting) if fitting else None), (seqs, tokens)


def test_custom_sizes_and_bad_ladders():
    ladder = GraphLadder.build(max_seqs=4, max_tokens=16, sizes=[16, 2, 4, 2])
    assert ladder.sizes == (2, 4, 16)
    assert ladder.bucket_for(1, 1) == Bucket(2, 2) and ladder.bucket_for(3, 5) == Bucket(16, 4)
    with pytest.raises(ValueError):
        GraphLadder((), 4)
    with pytest.raises(ValueError):
        GraphLadder((0, 4), 4)
