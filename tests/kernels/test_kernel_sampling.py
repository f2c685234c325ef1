"""sample: Triton vs reference token-for-token, greedy/top-k/top-p edge cases, seeding."""

import pytest
import torch
from kernel_testutils import TRITON_DEVICE, requires_triton

import kernels
from kernels.sampling import draw_gumbel, sample_torch, sample_triton

DEV = TRITON_DEVICE or "cpu"
IMPLS = ["torch", pytest.param("triton", marks=requires_triton)]


def _gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def _params(temps, ks, ps):
    return (
        torch.tensor(temps, dtype=torch.float32, device=DEV),
        torch.tensor(ks, dtype=torch.int64, device=DEV),
        torch.tensor(ps, dtype=torch.float32, device=DEV),
    )


# One row per setting: greedy, top_k=1, tiny top_p, top-k, top-p, both, plain, hot, k >= V.
MIX = _params(
    [0.0, 1.0, 0.8, 0.7, 1.0, 1.3, 1.0, 2.5, 1.0],
    [0, 1, 0, 5, 0, 20, 0, 0, 10_000],
    [1.0, 1.0, 1e-6, 1.0, 0.9, 0.8, 1.0, 1.0, 0.5],
)


@requires_triton
@pytest.mark.parametrize("vocab", [100, 5000])  # 5000: several 4096-wide chunks
def test_triton_matches_reference(vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = 2 * torch.randn(len(MIX[0]), vocab, generator=g)
    logits[:2, [10, vocab - 7]] = logits.max() + 1  # exact tie (across chunks for 5000)
    logits = logits.to(DEV)
    for seed in range(3):
        ref = kernels.sample(logits, *MIX, generator=_gen(seed), impl="torch")
        out = kernels.sample(logits, *MIX, generator=_gen(seed), impl="triton")
        assert out.dtype == torch.int64
        assert torch.equal(out, ref), (seed, out, ref)


@requires_triton
def test_triton_matches_reference_many_rows_small_vocab():
    """Many random (temperature, top_k, top_p) rows on a peaked 64-token vocab, fp16 logits."""
    g = torch.Generator().manual_seed(5)
    b, v = 24, 64
    logits = (3 * torch.randn(b, v, generator=g)).to(DEV, torch.float16)
    temps = torch.rand(b, generator=g) * 1.5
    temps[::5] = 0.0
    ks = torch.randint(0, 12, (b,), generator=g)
    ps = torch.where(torch.rand(b, generator=g) < 0.5, torch.rand(b, generator=g), 1.0)
    args = (temps.to(DEV), ks.to(DEV), ps.to(DEV))
    gumbel = draw_gumbel(b, v, DEV, _gen(0))
    assert torch.equal(sample_triton(logits, *args, gumbel), sample_torch(logits, *args, gumbel))


@pytest.mark.parametrize("impl", IMPLS)
def test_greedy_equivalents(impl):
    """temperature 0 and top_k=1 give argmax (first index among ties) whatever the seed, so
    whatever device draws the noise; tiny top_p gives one of the tied maxima."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 50, generator=g).to(DEV)
    logits[0, 7] = logits[0, 30] = logits[0].max() + 1.0  # tie: first index wins
    argmax = logits.argmax(-1)
    assert argmax[0] == 7
    for temps, ks, ps in [([0.0] * 6, [0] * 6, [1.0] * 6), ([1.0] * 6, [1] * 6, [1.0] * 6),
                          ([0.7] * 6, [1] * 6, [0.5] * 6)]:
        for seed in range(8):
            out = kernels.sample(logits, *_params(temps, ks, ps), generator=_gen(seed), impl=impl)
            assert torch.equal(out, argmax), (temps[0], ks[0], seed)
    out = kernels.sample(logits, *_params([1.0] * 6, [0] * 6, [1e-7] * 6), generator=_gen(3), impl=impl)
    assert torch.equal(out[1:], argmax[1:])  # row 0 has a tie at the top: either is allowed
    assert out[0] in (7, 30)


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_mixing_greedy_and_sampled(impl):
    logits = torch.zeros(4, 300, device=DEV)
    logits[:, 123] = 0.5  # flat-ish: sampled rows rarely hit the argmax
    temps, ks, ps = _params([0.0, 1.0, 0.0, 1.0], [0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0])
    outs = [kernels.sample(logits, temps, ks, ps, generator=_gen(s), impl=impl) for s in range(5)]
    for out in outs:
        assert out[0] == 123 and out[2] == 123
    assert len({int(o[1]) for o in outs} | {int(o[3]) for o in outs}) > 2


@pytest.mark.parametrize("impl", IMPLS)
def test_seeding(impl):
    logits = torch.zeros(8, 1000, device=DEV)  # flat distribution
    params = _params([1.0] * 8, [0] * 8, [1.0] * 8)
    a = kernels.sample(logits, *params, generator=_gen(42), impl=impl)
    b = kernels.sample(logits, *params, generator=_gen(42), impl=impl)
    c = kernels.sample(logits, *params, generator=_gen(43), impl=impl)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("impl", IMPLS)
def test_masked_tokens_never_sampled(impl):
    logits = torch.full((3, 40), float("-inf"), device=DEV)
    logits[:, [3, 17, 39]] = torch.tensor([0.0, 0.1, -0.2], device=DEV)
    params = _params([1.0, 2.0, 0.5], [0, 2, 0], [1.0, 1.0, 0.95])
    for s in range(4):
        out = kernels.sample(logits, *params, generator=_gen(s), impl=impl)
        assert set(out.tolist()) <= {3, 17, 39}


def test_reference_respects_top_k_and_top_p_sets():
    """Over many draws, sampled tokens stay inside the top-k / nucleus sets."""
    g = torch.Generator().manual_seed(9)
    v = 30
    row = torch.randn(v, generator=g)
    b = 400
    logits = row.expand(b, v).contiguous()
    order = row.argsort(descending=True)
    top4 = set(order[:4].tolist())
    out = kernels.sample(logits, *_params([1.0] * b, [4] * b, [1.0] * b), generator=_gen(0))
    assert set(out.tolist()) <= top4 and len(set(out.tolist())) == 4
    probs = row.softmax(0)[order]
    n = int((probs.cumsum(0) < 0.6).sum()) + 1  # smallest prefix with mass >= 0.6
    nucleus = set(order[:n].tolist())
    out = kernels.sample(logits, *_params([1.0] * b, [0] * b, [0.6] * b), generator=_gen(1))
    assert set(out.tolist()) <= nucleus and len(set(out.tolist())) == n


def test_reference_distribution_and_temperature():
    """Empirical frequencies match softmax(logits / T) (Gumbel-max is exact)."""
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    b = 20000
    for temp in (1.0, 0.5):
        out = kernels.sample(
            logits.expand(b, 4).contiguous(),
            *_params([temp] * b, [0] * b, [1.0] * b),
            generator=torch.Generator().manual_seed(0),
        )
        freq = torch.bincount(out, minlength=4).float() / b
        expect = (logits / temp).softmax(0)
        assert (freq - expect).abs().max() < 0.015, (temp, freq, expect)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="mixing devices needs a CUDA device")
def test_parameters_and_generator_on_another_device_than_the_logits():
    """Logits on the CPU with parameters and generator on CUDA, and the other way round."""
    logits = torch.randn(5, 64, generator=torch.Generator().manual_seed(2))
    for lg, par in [("cpu", "cuda"), ("cuda", "cpu")]:
        params = (torch.ones(5, device=par), torch.zeros(5, dtype=torch.int64, device=par),
                  torch.ones(5, device=par))
        out = kernels.sample(logits.to(lg), *params, generator=torch.Generator(device=par).manual_seed(0))
        assert out.device.type == lg and out.shape == (5,)
        greedy = kernels.sample(logits.to(lg), torch.zeros(5, device=par), *params[1:])
        assert torch.equal(greedy.cpu(), logits.argmax(-1))
