"""Import Vidur's published GPU profiles (``mlp.csv``, ``attention.csv``, ``all_reduce.csv``).

Vidur (MLSys 2024) times each operation of a layer on real A100 / H100 GPUs, in milliseconds:

- ``mlp.csv``: per-token ops over ``num_tokens`` × ``num_tensor_parallel_workers``, columns
  ``time_stats.<op>.{min,max,mean,median,std}`` (``emb`` once per model; the rest per layer);
- ``attention.csv``: ``attn_prefill`` by ``prefill_chunk_size`` × ``kv_cache_size`` and
  ``attn_decode`` by ``batch_size`` × ``kv_cache_size``, per layer;
- ``all_reduce.csv``: one all-reduce by message ``size`` (bytes) × ``num_workers``.

They become a servesim profile of per-op tables and fits (no whole-step fit); what Vidur does
not measure (LM head, sampling, per-step CPU overhead) falls back to the roofline or a given
overhead, as the profile's notes say.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.fitting import fit_linear, relative_errors, table, thin
from sim.errors import ProfileError
from sim.inputs import check_file
from sim.pricing.profile import SCHEMA_VERSION, Device, Ops, Profile
from sim.scenario.specs import ModelSpec, get_model
from sim.traffic.traces import read_csv as read_table

MS = 1e-3
MAX_POINTS = 64  # per table: the shipped profiles stay small
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
OTHER_OPS = {"input_layernorm": 1, "post_attention_layernorm": 1, "attn_rope": 1, "mlp_act": 1,
             "add": 2}  # per layer, with how many times a layer runs it
ONCE_OPS = ("emb",)
SKIP_OPS = ("attn", "attn_prefill", "attn_decode", "attn_input_reshape", "attn_output_reshape",
            "all_reduce", "send_recv")


def read_csv(path: str | Path, required: tuple[str, ...]) -> pd.DataFrame:
    """One of Vidur's CSVs, with the columns its format has."""
    path = check_file(path, None, ProfileError, "Vidur CSV file")
    return read_table(path, None, required, error=ProfileError, empty="no rows")


def _ops_in(df: pd.DataFrame) -> list[str]:
    return sorted({m.group(1) for c in df.columns if (m := re.fullmatch(r"time_stats\.(.+)\.median", c))})


def _for_tp(df: pd.DataFrame, path, column: str, tp: int) -> pd.DataFrame:
    rows = df[df[column] == tp]
    if rows.empty:
        have = sorted(int(x) for x in df[column].unique())
        raise ProfileError(str(path), column, f"no rows for tp={tp} (the file has {have})")
    return rows


def _check_shape(df: pd.DataFrame, path, spec: ModelSpec, columns: dict[str, str]) -> None:
    for col, attr in columns.items():
        if col not in df.columns:
            continue
        values = sorted(int(x) for x in df[col].unique())
        want = getattr(spec, attr)
        if values != [want]:
            raise ProfileError(str(path), col, f"measured {values}, but {spec.name} has "
                               f"{attr}={want}: these CSVs are of another model")


def mlp_tables(path, spec: ModelSpec, tp: int) -> tuple[Ops, list[str]]:
    df = read_csv(path, ("num_tokens", "num_tensor_parallel_workers"))
    df = _for_tp(df, path, "num_tensor_parallel_workers", tp)
    _check_shape(df, path, spec, {"n_head": "num_heads", "n_kv_head": "num_kv_heads",
                                  "n_embd": "hidden_size", "n_expanded_embd": "intermediate_size"})
    ops = _ops_in(df)
    missing = [o for o in LINEAR_OPS if o not in ops]
    if missing:
        raise ProfileError(str(path), f"time_stats.{missing[0]}.median", "missing column")
    by = df.groupby("num_tokens").median(numeric_only=True)
    if len(by) < 2:
        raise ProfileError(str(path), "num_tokens", "needs at least two token counts")
    med = {o: by[f"time_stats.{o}.median"].to_numpy(dtype=float) * MS for o in ops}
    layers = spec.num_layers
    linear = layers * sum(med[o] for o in LINEAR_OPS) + sum(med[o] for o in ONCE_OPS if o in med)
    other_names = [o for o in ops if o not in LINEAR_OPS + ONCE_OPS + SKIP_OPS]
    other = sum(layers * OTHER_OPS.get(o, 1) * med[o] for o in other_names)
    if "input_layernorm" in med:
        other = other + med["input_layernorm"]  # the final norm
    x = by.index.to_numpy(dtype=float)
    notes = [f"mlp: {', '.join(LINEAR_OPS)} (+emb) as linear; {', '.join(other_names) or 'none'} "
             f"as other; {len(x)} token counts {int(x.min())}–{int(x.max())}, tp={tp}"]
    unknown = [o for o in other_names if o not in OTHER_OPS]
    if unknown:
        notes.append(f"mlp: ops counted once per layer as other: {', '.join(unknown)}")
    ops_out = Ops(linear=_table(x, linear),
                  other=_table(x, np.asarray(other, dtype=float) * np.ones_like(x))
                  if other_names else None)
    return ops_out, notes


def _table(x, y):
    return table(zip(*thin(x, y, MAX_POINTS), strict=True))


def attention_fits(path, spec: ModelSpec, tp: int):
    df = read_csv(path, ("batch_size", "kv_cache_size", "is_prefill",
                         "num_tensor_parallel_workers"))
    df = _for_tp(df, path, "num_tensor_parallel_workers", tp)
    _check_shape(df, path, spec, {"n_q_head": "num_heads", "n_kv_head": "num_kv_heads",
                                  "n_embd": "hidden_size"})
    layers = spec.num_layers
    prefill_mask = df["is_prefill"].astype(str).str.lower().isin(("true", "1"))

    def seconds(rows: pd.DataFrame, op: str) -> np.ndarray:
        t = rows[f"time_stats.{op}.median"].to_numpy(dtype=float)
        for extra in ("attn_input_reshape", "attn_output_reshape"):
            col = f"time_stats.{extra}.median"
            if col in rows:
                t = t + np.nan_to_num(rows[col].to_numpy(dtype=float))
        return layers * t * MS

    notes, fits = [], {}
    pre = df[prefill_mask]
    if len(pre) and "time_stats.attn_prefill.median" in df and "prefill_chunk_size" in df:
        pre = pre[pre["time_stats.attn_prefill.median"].notna()]
        b = pre["batch_size"].to_numpy(dtype=float)
        q = pre["prefill_chunk_size"].to_numpy(dtype=float)
        kv = pre["kv_cache_size"].to_numpy(dtype=float) + q
        feats = [{"prefill_rows": r, "prefill_attn": r * a * k} for r, a, k in zip(b, q, kv, strict=True)]
        y = seconds(pre, "attn_prefill")
        names = ["const", "prefill_rows", "prefill_attn"] if len(set(b)) > 1 else ["const", "prefill_attn"]
        fits["attn_prefill"] = fit_linear(names, feats, y)
        notes.append(_fit_note("attn_prefill", fits["attn_prefill"], feats, y))
    dec = df[~prefill_mask]
    if len(dec) and "time_stats.attn_decode.median" in df:
        dec = dec[dec["time_stats.attn_decode.median"].notna()]
        b = dec["batch_size"].to_numpy(dtype=float)
        ctx = dec["kv_cache_size"].to_numpy(dtype=float) + 1
        feats = [{"decode_rows": r, "decode_context": r * c} for r, c in zip(b, ctx, strict=True)]
        y = seconds(dec, "attn_decode")
        fits["attn_decode"] = fit_linear(["const", "decode_rows", "decode_context"], feats, y)
        notes.append(_fit_note("attn_decode", fits["attn_decode"], feats, y))
    if not fits:
        raise ProfileError(str(path), "time_stats.attn_prefill.median", "no attention timings")
    return fits, notes


def _fit_note(name, fit, feats, y) -> str:
    err = np.abs(relative_errors(fit, feats, y))
    return (f"{name}: linear fit on {len(y)} Vidur points, median error {np.median(err):.1%}, "
            f"p90 {np.percentile(err, 90):.1%}")


def allreduce_table(path, tp: int):
    df = read_csv(path, ("num_workers", "size", "time_stats.all_reduce.median"))
    df = _for_tp(df, path, "num_workers", tp)
    if "devices_per_node" in df:  # prefer all GPUs in one node (NVLink), as a TP group is
        df = df[df["devices_per_node"] == df["devices_per_node"].max()]
    by = df.groupby("size")["time_stats.all_reduce.median"].median()
    if len(by) < 2:
        raise ProfileError(str(path), "size", "needs at least two message sizes")
    note = (f"all_reduce: {len(by)} sizes {int(by.index.min())}–{int(by.index.max())} bytes, "
            f"{tp} GPUs")
    return _table(by.index.to_numpy(dtype=float), by.to_numpy(dtype=float) * MS), note


def gpu_name(path: str | Path) -> str:
    """``compute/a100/...`` -> ``A100`` (Vidur's folder names)."""
    for part in Path(path).parts:
        if re.fullmatch(r"[ah]100.*", part.lower()):
            return part.split("_")[0].upper()
    return "GPU"


def import_vidur(mlp: str | Path, *, model: str, attention: str | Path | None = None,
                 all_reduce: str | Path | None = None, tp: int = 1, gpu: str | None = None,
                 overhead_s: float = 0.002) -> Profile:
    try:
        spec = get_model(model)
    except KeyError as e:
        raise ProfileError("--model", None, e.args[0]) from None
    ops, notes = mlp_tables(mlp, spec, tp)
    updates = {}
    if attention:
        fits, more = attention_fits(attention, spec, tp)
        updates.update(fits)
        notes += more
    else:
        notes.append("no attention.csv: attention falls back to the roofline")
    if all_reduce and tp > 1:
        updates["allreduce"], note = allreduce_table(all_reduce, tp)
        notes.append(note)
    elif tp > 1:
        notes.append("no all_reduce.csv: all-reduce falls back to the roofline")
    elif all_reduce:
        notes.append("all_reduce.csv ignored at tp=1")
    for op, covered in (("attn_prefill", "attn_prefill" in updates),
                        ("attn_decode", "attn_decode" in updates)):
        if attention and not covered:
            notes.append(f"{op}: no timings in attention.csv; falls back to the roofline")
    notes.append("lm_head and sampling: not in Vidur's CSVs; priced by the roofline")
    notes.append(f"overhead_s: {overhead_s * 1e3:g} ms per step, assumed (Vidur's CPU overhead "
                 "profiles are not imported)")
    ops = ops.model_copy(update=updates)
    files = {"mlp": str(mlp), "attention": str(attention) if attention else None,
             "all_reduce": str(all_reduce) if all_reduce else None}
    return Profile(
        schema_version=SCHEMA_VERSION, source="vidur import (servesim import-vidur)",
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device=Device(name=gpu or gpu_name(mlp), type="cuda"), model=spec.name,
        model_shape={"num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
                     "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
                     "intermediate_size": spec.intermediate_size},
        dtype="fp16", tp=tp, versions={"vidur_format": "profiling CSV (time_stats.<op>.<stat>, ms)"},
        grid={"files": {k: "/".join(Path(v).parts[-4:]) if v else None for k, v in files.items()},
              "tokens": [float(ops.linear.x[0]), float(ops.linear.x[-1])]},
        ops=ops, step=None, overhead_s=overhead_s, notes=notes)
