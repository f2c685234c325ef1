"""The power model: what one GPU draws during a step, and a power cap as a speed limit.

A GPU draws its idle power, plus ``hbm_w`` at the datasheet HBM bandwidth and ``tensor_w`` at the
datasheet dense tensor-core peak, in proportion to the share of each the step uses, and never
more than its TDP (the catalog's figures and their sources: sim/scenario/data/gpus.yaml). The
shares come from the roofline's floor of the step's shape (``floor_parts``: its bytes and FLOPs
in seconds at the peaks) over the step's duration, whatever priced it — the roofline or a
calibration profile — so a memory-bound decode draws little more than idle + hbm_w × its
bandwidth share and a compute-bound prefill draws up to TDP. The seconds a step spends on
CPU overhead or pipeline waits lower both shares: the GPU idles then. So a step's draw is

    P(d) = idle + min(W / d, limit - idle),   W = (tensor_w · flop_s + hbm_w · byte_s) / pp

per GPU (W: the joules above idle one GPU of the replica spends on the step at full clock;
a pipeline's stages share a step's work), ``limit`` the cap, else TDP.

The cap slows a step (``capped``), as a GPU's power limiter lowers its clock: at clock ratio r the
compute-bound share β = flop_s / (flop_s + byte_s) of the step stretches by 1/r, the memory
traffic does not, and energy per FLOP falls as V² ∝ r² (P ∝ f·V² ≈ f^3, EXPONENT). The step runs
at the highest r in [R_MIN, 1] whose draw fits under the cap (bisection; below R_MIN the memory
traffic is throttled too, in proportion). A step priced without a cap was priced at the TDP
limit the GPU ran under when its efficiencies were measured, so the cap compares against the
step's TDP-limited draw: a cap at TDP changes nothing, and a memory-bound step under the cap
is not slowed. The draw of a capped step is then the cap itself, which is what ``draw`` gives
from its duration: pricing and energy agree.
"""

from __future__ import annotations

import numpy as np

from sim.core.jit import entry, leaf
from sim.core.plan import SHAPE_SIZE, Shape
from sim.pricing.roofline import floor_parts

# A replica's power row (per GPU): its figures, the cap (0: none), TP and PP.
IDLE, TDP, HBM_W, TENSOR_W, CAP, PP = range(6)
POWER_SIZE = 6
EXPONENT = 3.0  # P ∝ f·V² with V ∝ f over the DVFS range: dynamic power ∝ f^3
R_MIN = 0.2  # the lowest clock ratio a cap reaches (H100: ~345 of 1,980 MHz)
BISECTIONS = 48  # clock ratio to 2^-48: deterministic, the same bits in every loop
# The rule for a GPU without measured figures (gpus.yaml's comment has the sources).
IDLE_SHARE, HBM_SHARE, TENSOR_AT_TDP = 0.115, 0.45, 0.75


def power_figures(gpu) -> tuple[float, float, float, float]:
    """(idle_w, hbm_w, tensor_w, tdp_w) of a GpuSpec: its own figures, or the rule's from its TDP
    (all 0: a GPU without ``power_w`` has no power model)."""
    tdp = float(gpu.power_w)
    idle = gpu.idle_w or IDLE_SHARE * tdp
    return idle, gpu.hbm_w or HBM_SHARE * tdp, gpu.tensor_w or (tdp - idle) / TENSOR_AT_TDP, tdp


def power_row(gpu, cap_w: float | None = None, pp: int = 1) -> np.ndarray:
    """The power row of a replica's engines (the cap per GPU, None: none)."""
    row = np.zeros(POWER_SIZE)
    row[IDLE], row[HBM_W], row[TENSOR_W], row[TDP] = power_figures(gpu)
    row[CAP] = cap_w or 0.0
    row[PP] = pp
    return row


def cap_refusal(gpu, cap_w: float) -> str | None:
    """Why a per-GPU cap of ``cap_w`` cannot hold on ``gpu`` (None: it can)."""
    idle, _, _, tdp = power_figures(gpu)
    if tdp <= 0.0:
        return f"{gpu.name} has no power_w (TDP) to cap; expected a GPU with power_w"
    expected = f"expected {idle:g} < power_cap_w ≤ {tdp:g}"
    if cap_w > tdp:
        return f"{cap_w:g} W is above {gpu.name}'s TDP of {tdp:g} W; {expected}"
    if cap_w <= idle:
        return f"{cap_w:g} W is at or below {gpu.name}'s idle draw of {idle:g} W; {expected}"
    return None


@leaf
def _work(w, flop_s, byte_s):
    """Joules above idle one GPU spends on a step at full clock."""
    return (w[TENSOR_W] * flop_s + w[HBM_W] * byte_s) / w[PP]


@leaf
def draw(w, flop_s, byte_s, d):
    """Watts one GPU draws during a step of ``d`` seconds with this work (see the module)."""
    if w[TDP] <= 0.0:
        return 0.0
    limit = w[CAP] if w[CAP] > 0.0 else w[TDP]
    dyn = _work(w, flop_s, byte_s) / d if d > 0.0 else 0.0
    return w[IDLE] + (dyn if dyn <= limit - w[IDLE] else limit - w[IDLE])


@leaf
def _stretch(beta, r):
    return 1.0 + beta * (1.0 / r - 1.0)


@leaf
def _dyn_at(w, flop_s, byte_s, t, beta, scale, r):
    """Watts above idle at clock ratio ``r`` (``scale``: the TDP limit's share of the model's draw)."""
    return scale * (w[TENSOR_W] * flop_s * r ** (EXPONENT - 1.0) + w[HBM_W] * byte_s) / w[PP] / (t * _stretch(beta, r))


@leaf
def capped(p, w, s, t):
    """The seconds of a step priced at ``t`` under the power row ``w``'s cap (``p``: the
    replica's roofline row, whose floor gives the step's work)."""
    cap = w[CAP]
    if cap <= 0.0 or t <= 0.0:
        return t
    byte_s, flop_s = floor_parts(p, s)
    work = _work(w, flop_s, byte_s)
    if work <= 0.0:
        return t
    head = w[TDP] - w[IDLE]
    scale = head * t / work if work > head * t else 1.0  # the draw the TDP limit allowed: at most TDP
    room = cap - w[IDLE]
    if scale * work / t <= room:
        return t
    beta = flop_s / (flop_s + byte_s)
    lo, hi = R_MIN, 1.0
    if _dyn_at(w, flop_s, byte_s, t, beta, scale, lo) > room:  # memory throttled too
        return t * _stretch(beta, lo) * _dyn_at(w, flop_s, byte_s, t, beta, scale, lo) / room
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        if _dyn_at(w, flop_s, byte_s, t, beta, scale, mid) > room:
            hi = mid
        else:
            lo = mid
    return t * _stretch(beta, lo)


def log_shapes(steps, block_size: np.ndarray) -> np.ndarray:
    """Step shapes from the step log's columns, for the power of logged steps. The log keeps
    tokens and rows; the context a step reads is taken as the KV blocks its requests held ×
    the block size (at most a block per row more than the pricing's exact context), and a
    prompt chunk's attention pairs as those of fresh prompts split evenly over the prefill rows."""
    n = len(steps)
    out = np.zeros((n, SHAPE_SIZE))
    seqs = steps["num_seqs"].to_numpy(np.float64)
    decodes = steps["decode_seqs"].to_numpy(np.float64)
    prefill = steps["prefill_tokens"].to_numpy(np.float64)
    out[:, Shape.NUM_TOKENS] = steps["num_tokens"].to_numpy(np.float64)
    out[:, Shape.NUM_SEQS] = seqs
    out[:, Shape.DECODE_SEQS] = decodes
    out[:, Shape.PREFILL_TOKENS] = prefill
    out[:, Shape.PREFILL_ATTN] = prefill * prefill / np.maximum(seqs - decodes, 1.0)
    out[:, Shape.NUM_SAMPLED] = seqs
    ctx = steps["kv_blocks_used"].to_numpy(np.float64) * block_size[steps["engine"].to_numpy(np.int64)]
    out[:, Shape.DECODE_CONTEXT] = np.where(decodes > 0, np.maximum(ctx - prefill, 0.0), 0.0)
    return out


@entry
def _draws(params, power, engine, shapes, duration, out):
    for i in range(shapes.shape[0]):
        e = engine[i]
        byte_s, flop_s = floor_parts(params[e], shapes[i])
        out[i] = draw(power[e], flop_s, byte_s, duration[i])


def step_draws(params: np.ndarray, power: np.ndarray, engine: np.ndarray, shapes: np.ndarray,
               duration: np.ndarray) -> np.ndarray:
    """Watts per GPU of each logged step (``params``/``power``: each engine's roofline and power rows)."""
    out = np.empty(len(shapes))
    _draws(np.ascontiguousarray(params), np.ascontiguousarray(power), np.ascontiguousarray(engine, dtype=np.int64),
           np.ascontiguousarray(shapes), np.ascontiguousarray(duration, dtype=np.float64), out)
    return out
