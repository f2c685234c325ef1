"""Token sampling with temperature, top-k and top-p, driven by caller-supplied noise.

Semantics (shared by both implementations):

* ``temperature <= 0`` or ``top_k == 1``: greedy, ``argmax(logits)`` (first index among
  ties), whatever the noise: a top-1 request gets the same token on every device.
* otherwise ``l = logits / temperature`` (fp32) and the kept set is
  ``{i : l_i >= tau}`` where, with ``k = top_k`` (off when ``k <= 0`` or ``k >= V``) and
  ``p = top_p`` (off when ``p >= 1``):

  - ``tau_k`` = the k-th largest ``l`` (ties at the threshold are all kept);
  - ``tau_p`` = the largest value ``tau`` such that, with ``w_i = exp(l_i - max l)``,
    ``sum_{i kept by top-k, l_i >= tau} w_i >= p * sum_{i kept by top-k} w_i``
    (the smallest nucleus reaching mass ``p``, ties kept);
  - ``tau = max(tau_k, tau_p)``.
* the token is ``argmax_{i kept} (l_i + g_i)`` with ``g = -log(E)``, ``E ~ Exp(1)`` i.i.d.
  (Gumbel-max == exponential race: an exact sample from softmax(l) renormalised over the
  kept set). ``sample`` draws ``E`` with torch from ``generator`` and hands the same ``g``
  to either implementation, so they agree token for token (barring fp32 rounding exactly
  at a top-p boundary).

The Triton kernel finds the thresholds without sorting: it bisects over the 32-bit
order-preserving integer image of the fp32 values (at most 32 passes over the row each).
"""

import torch

from kernels.dispatch import tl, triton, use_triton
from kernels.variants import launch

# ----------------------------------------------------------------------------- noise


def draw_gumbel(
    batch: int,
    vocab: int,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``-log(E)``, ``E ~ Exp(1)``, ``[batch, vocab]`` fp32, drawn on the generator's device."""
    gen_device = generator.device if generator is not None else torch.device(device)
    e = torch.empty((batch, vocab), dtype=torch.float32, device=gen_device)
    e.exponential_(generator=generator)
    return e.log_().neg_().to(device)


# ----------------------------------------------------------------------------- reference


def _keep_mask(row: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Kept set of one temperature-scaled fp32 row (see module docstring)."""
    v = row.numel()
    keep = torch.ones_like(row, dtype=torch.bool)
    if 0 < top_k < v:
        kth = torch.topk(row, top_k).values[-1]
        keep = row >= kth
    if top_p < 1.0:
        vals = torch.sort(row[keep], descending=True).values
        w = torch.exp(vals - row.max())
        cum = torch.cumsum(w, dim=0)
        target = torch.tensor(top_p, dtype=torch.float32, device=row.device) * w.sum()
        i = min(int((cum < target).sum()), vals.numel() - 1)  # first index reaching the mass
        keep = keep & (row >= vals[i])
    return keep


def sample_torch(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    gumbel: torch.Tensor,
) -> torch.Tensor:
    """Reference sampler: per row, build the kept set by sorting, then Gumbel-max."""
    x = logits.float()
    temp = temperature.float()
    greedy = (temp <= 0) | (top_k == 1)
    scaled = x / torch.where(greedy, torch.ones_like(temp), temp)[:, None]
    out = x.argmax(dim=-1)
    ks, ps, gs = top_k.tolist(), top_p.float().tolist(), greedy.tolist()
    for b in range(x.shape[0]):
        if gs[b]:
            continue
        keep = _keep_mask(scaled[b], int(ks[b]), ps[b])
        score = torch.where(keep, scaled[b] + gumbel[b], float("-inf"))
        out[b] = score.argmax()
    return out.to(torch.int64)


# ----------------------------------------------------------------------------- triton


@triton.jit
def _sortable_key(x):
    """fp32 -> int32 with the same order (``-0.0`` folded onto ``+0.0``)."""
    x = tl.where(x == 0.0, 0.0, x)
    i = x.to(tl.int32, bitcast=True)
    return tl.where(i < 0, i ^ 0x7FFFFFFF, i)


@triton.jit
def _sample_kernel(
    logits_ptr,
    gumbel_ptr,
    temp_ptr,
    topk_ptr,
    topp_ptr,
    out_ptr,
    V,
    s_l,
    s_g,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    lrow = logits_ptr + row * s_l
    grow = gumbel_ptr + row * s_g
    t = tl.load(temp_ptr + row).to(tl.float32)
    k = tl.load(topk_ptr + row).to(tl.int64)
    p = tl.load(topp_ptr + row).to(tl.float32)

    # Pass 1: argmax (first index) and min of the raw logits.
    best_v = float("-inf")
    best_i = 0
    min_v = float("inf")
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        x = tl.load(lrow + offs, mask=mask, other=float("-inf")).to(tl.float32)
        c_max = tl.max(x, 0)
        c_arg = tl.argmax(x, 0, tie_break_left=True)
        better = c_max > best_v
        best_i = tl.where(better, start + c_arg, best_i)
        best_v = tl.where(better, c_max, best_v)
        min_v = tl.minimum(min_v, tl.min(tl.where(mask, x, float("inf")), 0))
    if (t <= 0.0) | (k == 1):
        tl.store(out_ptr + row, best_i.to(tl.int64))
        return

    m = best_v / t  # max of the scaled row (division by t > 0 is monotone)
    key_hi = _sortable_key(m).to(tl.int64)
    thr = _sortable_key(min_v / t).to(tl.int64)  # keep everything

    # top-k: largest key t_k with count(key >= t_k) >= k.
    if (k > 0) & (k < V):
        lo = thr
        hi = key_hi
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            cnt = 0
            for start in range(0, V, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < V
                x = tl.load(lrow + offs, mask=mask, other=0.0).to(tl.float32) / t
                cnt += tl.sum((mask & (_sortable_key(x) >= mid)).to(tl.int32), 0)
            if cnt >= k:
                lo = mid
            else:
                hi = mid - 1
        thr = lo

    # top-p: largest key t_p with mass(key >= t_p) >= p * mass(key >= t_k).
    if p < 1.0:
        z = 0.0
        for start in range(0, V, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < V
            x = tl.load(lrow + offs, mask=mask, other=0.0).to(tl.float32) / t
            sel = mask & (_sortable_key(x) >= thr)
            z += tl.sum(tl.where(sel, tl.exp(x - m), 0.0), 0)
        target = p * z
        lo = thr
        hi = key_hi
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            mass = 0.0
            for start in range(0, V, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < V
                x = tl.load(lrow + offs, mask=mask, other=0.0).to(tl.float32) / t
                sel = mask & (_sortable_key(x) >= mid)
                mass += tl.sum(tl.where(sel, tl.exp(x - m), 0.0), 0)
            if mass >= target:
                lo = mid
            else:
                hi = mid - 1
        thr = lo

    # Gumbel-max over the kept set.
    best_s = float("-inf")
    tok = 0
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        x = tl.load(lrow + offs, mask=mask, other=0.0).to(tl.float32) / t
        g = tl.load(grow + offs, mask=mask, other=0.0)
        score = tl.where(mask & (_sortable_key(x) >= thr), x + g, float("-inf"))
        c_max = tl.max(score, 0)
        c_arg = tl.argmax(score, 0, tie_break_left=True)
        better = c_max > best_s
        tok = tl.where(better, start + c_arg, tok)
        best_s = tl.where(better, c_max, best_s)
    tl.store(out_ptr + row, tok.to(tl.int64))


def sample_triton(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    gumbel: torch.Tensor,
    block: int | None = None,
) -> torch.Tensor:
    """Triton sampler: one program per row, thresholds by bisection (no sort)."""
    b, v = logits.shape
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    gumbel = gumbel.float().contiguous()
    out = torch.empty(b, dtype=torch.int64, device=logits.device)
    if b == 0:
        return out
    block = block or min(4096, triton.next_power_of_2(v))
    launch(
        _sample_kernel, (b,),
        logits, gumbel, temperature.contiguous(), top_k.contiguous(), top_p.contiguous(), out,
        v, logits.stride(0), gumbel.stride(0), BLOCK=block,
    )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- public


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    generator: torch.Generator | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Sample one token per row of ``logits[B, V]``; returns ``[B]`` int64.

    Noise is always drawn (``B * V`` exponentials from ``generator``, on the generator's
    device), greedy rows included, so the random stream does not depend on the mix of greedy
    and sampled rows. The per-row parameters may live on any device: they are moved to the
    logits' device (they are ``B`` numbers), and the implementation is chosen for the logits.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [B, V], got {tuple(logits.shape)}")
    b, v = logits.shape
    for name, t in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)):
        if t.shape != (b,):
            raise ValueError(f"{name} must have shape ({b},), got {tuple(t.shape)}")
    dev = logits.device
    temperature, top_k, top_p = temperature.to(dev), top_k.to(dev), top_p.to(dev)
    gumbel = draw_gumbel(b, v, dev, generator)
    if use_triton(impl, logits, temperature, top_k, top_p):
        return sample_triton(logits, temperature, top_k, top_p, gumbel)
    return sample_torch(logits, temperature, top_k, top_p, gumbel)
