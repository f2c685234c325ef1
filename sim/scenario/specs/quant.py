"""A checkpoint's ``quantization_config`` as the storage dtype of each tensor group (attention,
dense MLP and shared experts, routed experts). Embeddings, the LM head, norms and routers stay
in the model dtype, as the quantizers leave them."""

from __future__ import annotations

import re

from sim.scenario.specs.models import WEIGHT_GROUPS

# A module path naming a group (the checkpoints' names: DeepSeek, Qwen, Llama, gpt-oss, Mixtral).
GROUP_PATTERNS = {
    "attention": re.compile(r"self_attn|attention|attn|q_proj|k_proj|v_proj|o_proj|qkv|kv_a|kv_b|q_a|q_b"),
    "experts": re.compile(r"experts(?!\.gate)|block_sparse_moe\.experts|w1|w2|w3"),
    "mlp": re.compile(r"mlp(?!\.(gate|router)\b)|shared_expert|gate_proj|up_proj|down_proj"),
}


def _groups_excluded(patterns, num_layers: int) -> set[str]:
    """The tensor groups a quantizer's exclusion list (module names, globs or ``re:`` patterns)
    leaves unquantized: a pattern for every layer (``layers.*.self_attn``) or one module of the
    group named in at least half of the layers (ModelOpt lists them layer by layer). servesim
    keeps one dtype per group, so a group partly left unquantized counts as unquantized (more
    bytes, never fewer)."""
    if patterns is None:
        return set()
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError("modules_to_not_convert: expected a list of module names")
    out, layers = set(), {g: set() for g in GROUP_PATTERNS}
    for p in patterns:
        p = p.removeprefix("re:")
        if "router" in p or re.search(r"\.gate$", p) or "lm_head" in p or "embed" in p or "norm" in p:
            continue
        layer = re.search(r"layers\.(\d+)\.", p)
        for group, rx in GROUP_PATTERNS.items():
            if rx.search(p) and not (group == "mlp" and "experts" in p):
                if layer:
                    layers[group].add(int(layer.group(1)))
                else:
                    out.add(group)
    return out | {g for g, idx in layers.items() if idx and 2 * len(idx) >= num_layers}


def _method_dtype(q: dict) -> tuple[str, str]:
    """The dtype a quantization method stores weights in, and the key that says so."""
    method = q.get("quant_method")
    if method == "fp8":
        return "fp8", "quant_method"
    if method == "mxfp4":
        return "mxfp4", "quant_method"
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo in ("FP8", "FP8_BLOCK", "FP8_PER_CHANNEL_PER_TOKEN"):
            return "fp8", "quant_algo"
        if algo == "NVFP4":
            return "fp4", "quant_algo"
        raise ValueError(f"quant_algo: {algo or 'missing'!r} is not a ModelOpt format servesim reads; expected FP8 or "
                         "NVFP4")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = q.get("bits", q.get("w_bit"))
        if bits == 4:
            return "int4", "bits"
        if bits == 8:
            return "int8", "bits"
        raise ValueError(f"bits: {bits!r} is not a weight width servesim reads for {method}; expected 4 or 8")
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method is None:
        raise ValueError("quant_method: missing; expected the quantization method")
    raise ValueError(f"quant_method: {method!r} is not a quantization servesim reads; expected fp8, mxfp4, modelopt "
                     "(FP8, NVFP4), awq, gptq or compressed-tensors")


def _compressed_tensors(q: dict) -> tuple[str, str]:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ValueError("config_groups: missing; a compressed-tensors config lists its schemes there")
    found = set()
    for name, g in groups.items():
        w = (g or {}).get("weights") or {}
        bits, kind = w.get("num_bits"), w.get("type")
        dtype = {(8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4", (4, "float"): "fp4"}.get((bits, kind))
        if dtype is None:
            raise ValueError(f"config_groups.{name}.weights: {bits}-bit {kind} weights are not a format servesim "
                             "reads; expected 8-bit float or int, 4-bit int or float")
        found.add(dtype)
    if len(found) > 1:
        raise ValueError(f"config_groups: schemes of different widths ({', '.join(sorted(found))}) are not modelled")
    return found.pop(), "config_groups"


def weight_dtypes(q, num_layers: int) -> tuple[tuple[str, str], ...]:
    """(group, dtype) for each tensor group the quantization covers (none: no quantization)."""
    if q is None:
        return ()
    if not isinstance(q, dict):
        raise ValueError(": expected a JSON object")
    dtype, _ = _method_dtype(q)
    skip = _groups_excluded(q.get("modules_to_not_convert"), num_layers)
    skip |= _groups_excluded(q.get("exclude_modules"), num_layers)
    if q.get("quant_method") == "compressed-tensors":
        skip |= _groups_excluded(q.get("ignore"), num_layers)
    return tuple((g, dtype) for g in WEIGHT_GROUPS if g not in skip)
