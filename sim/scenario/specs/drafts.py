"""What proposes speculative draft tokens, as a model of its own (for its weights and its
roofline)."""

from __future__ import annotations

from dataclasses import replace

from sim.scenario.specs.catalog import get_model
from sim.scenario.specs.models import ModelSpec


def draft_spec(method: str, target: ModelSpec, draft_model: str | None = None) -> ModelSpec | None:
    """What proposes the draft tokens, priced as a model of its own (None: nothing on the GPU).
    ``draft``: the draft model; ``mtp``: one of the target's next-n layers (its last layer's
    kind) with the shared LM head, run once per draft token; ``eagle``: an EAGLE head, one
    dense full-attention layer of the target's width with its LM head; ``ngram``: prompt lookup
    on the CPU."""
    if method == "draft":
        return get_model(draft_model)
    if method == "mtp":
        attn, mlp = target.layer_kinds()[-1]
        return replace(target, name=f"{target.name}-mtp", num_layers=1, layer_attention=(attn,), layer_mlp=(mlp,),
                       mtp_layers=0)
    if method == "eagle":
        return replace(target, name=f"{target.name}-eagle", num_layers=1, layer_attention=("full",),
                       layer_mlp=("dense",), num_experts=1, experts_per_token=1, mla=None, linear_attention=None,
                       mamba=None, moe_intermediate_size=0, shared_expert_size=0, mtp_layers=0,
                       num_kv_heads=target.num_kv_heads if target.mla is None else target.num_heads)
    return None
