"""Test helpers: a plain dense forward (no cache, no kernels) and hand-built plans."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from engine.executor import EngineExecutor
from engine.model import LlamaModel
from sim.core.plan import BatchPlan
from sim.core.requests import RequestTable


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float, interleaved: bool) -> torch.Tensor:
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :].float(), ang.sin()[:, None, :].float()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)


@torch.no_grad()
def dense_logits(model: LlamaModel, ids: Sequence[int]) -> torch.Tensor:
    """fp32 logits ``[T, V]`` of a full causal forward over ``ids``: the textbook model."""
    s = model.spec
    n, d = len(ids), s.head_dim
    pos = torch.arange(n)
    h = model.embed_tokens.float()[torch.as_tensor(ids)]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in model.layers:
        x = _rms(h, layer.input_layernorm.float(), s.norm_eps)
        w = layer.qkv_proj.float()
        q = (x @ w[: s.q_size].T).view(n, s.num_heads, d)
        k = (x @ w[s.q_size : s.q_size + s.kv_size].T).view(n, s.num_kv_heads, d)
        v = (x @ w[s.q_size + s.kv_size :].T).view(n, s.num_kv_heads, d)
        q, k = _rope(q, pos, s.rope_theta, s.rope_interleaved), _rope(k, pos, s.rope_theta,
                                                                     s.rope_interleaved)
        g = s.num_heads // s.num_kv_heads
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        att = torch.einsum("qhd,khd->hqk", q, k) / d**0.5
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", att, v).reshape(n, s.q_size)
        h = h + o @ layer.o_proj.float().T
        x = _rms(h, layer.post_attention_layernorm.float(), s.norm_eps)
        gate, up = (x @ layer.gate_up_proj.float().T).chunk(2, dim=-1)
        h = h + (torch.nn.functional.silu(gate) * up) @ layer.down_proj.float().T
    return _rms(h, model.norm.float(), s.norm_eps) @ model.lm_head.float().T


def dense_greedy(model: LlamaModel, prompt: Sequence[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(dense_logits(model, ids)[-1].argmax()))
    return ids[len(prompt) :]


def table_for(prompts: Sequence[Sequence[int]], output_len: int = 8) -> RequestTable:
    n = len(prompts)
    return RequestTable(np.zeros(n), np.array([len(p) for p in prompts]),
                        np.full(n, output_len))


def plan_for(table: RequestTable, block_size: int, rows: Sequence[tuple[int, int]],
             freed: Sequence[int] = (), preempted: Sequence[int] = ()) -> BatchPlan:
    """A plan for ``(rid, num_new)`` rows from the table's current state."""
    ids = np.array([r for r, _ in rows], dtype=np.int64)
    new = np.array([k for _, k in rows], dtype=np.int64)
    comp = table.num_computed[ids]
    return BatchPlan(
        req_ids=ids, num_new_tokens=new, num_computed=comp,
        samples=comp + new == table.num_tokens[ids],
        num_blocks=-(-(comp + new) // block_size),
        freed=np.asarray(freed, dtype=np.int64), preempted=np.asarray(preempted, dtype=np.int64),
    )  # fmt: skip


def commit(table: RequestTable, plan: BatchPlan) -> None:
    """What a policy's commit does to the token counts."""
    table.num_computed[plan.req_ids] += plan.num_new_tokens
    sampled = plan.req_ids[plan.samples]
    table.num_tokens[sampled] += 1
    table.num_generated[sampled] += 1


def make_executor(model: LlamaModel, prompts: Sequence[Sequence[int]] = (), *,
                  num_blocks: int = 64, block_size: int = 4, shuffle: int | None = 0,
                  **kw) -> EngineExecutor:
    """An executor that knows ``prompts`` (as requests 0, 1, ...) and whose free list is
    shuffled, so sequences get scattered blocks."""
    ex = EngineExecutor(model, num_blocks=num_blocks, block_size=block_size, **kw)
    for rid, prompt in enumerate(prompts):
        ex.add_request(rid, prompt)
    if shuffle is not None:
        order = np.random.default_rng(shuffle).permutation(num_blocks).tolist()
        ex.blocks.free_ids.clear()
        ex.blocks.free_ids.extend(order)
    return ex
