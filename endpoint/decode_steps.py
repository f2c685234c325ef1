"""A measured run's decode steps, priced by the profile for the same shapes.

A run's token times (each request's first token and its inter-token gaps) show the decode
steps it took part in: the gap that ends at a request's token n + 1 is one step, whose batch is
the requests that decoded over the whole gap and whose KV read is their contexts (prompt +
tokens so far, as the simulator's ``decode_context`` counts it). A gap that overlaps a
request's way in (sent → first token: the API path and its prefill) is ``mixed``; the others are
plain decode steps, which the profile prices here through the pricing core (the very steps the
simulator would price for that batch and context).

Measured / priced over the plain steps tells the two reasons a run's decode can be off apart:
the fit's shape (the ratio moves with batch or context within a run) or the server's speed
during the run (one ratio for every shape, different from run to run).

    python -m endpoint.decode_steps benchmarks/results/vllm-cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.plan import SHAPE_FIELDS, SHAPE_SIZE
from sim.errors import InputError

COLUMNS = ("request_id", "token_index", "gap_s", "batch", "context", "mixed")


def decode_gaps(requests: pd.DataFrame, itl: pd.DataFrame) -> pd.DataFrame:
    """One row per inter-token gap: the gap (seconds), the decoding batch over it, their summed
    context, and whether some request's way in overlapped it (``mixed``). Times of steps that
    end together differ by the client's jitter: a request counts in a gap's step when its first
    token came before the gap's middle and its last token after it."""
    req = requests[requests["status"] == "finished"] if "status" in requests else requests
    req = req.set_index("request_id")
    times: dict[int, np.ndarray] = {}
    for rid, g in itl.sort_values(["request_id", "token_index"]).groupby("request_id"):
        if rid in req.index:
            times[int(rid)] = float(req.at[rid, "first_token"]) + np.concatenate([[0.0], np.cumsum(g["gap_s"])])
    for rid in req.index:  # one-token requests: no gap, but they may share others' steps
        times.setdefault(int(rid), np.array([float(req.at[rid, "first_token"])]))
    ids = np.array(sorted(times))
    first = np.array([times[i][0] for i in ids])
    last = np.array([times[i][-1] for i in ids])
    prompt = req.loc[ids, "prompt_tokens"].to_numpy(dtype=float)
    sent = req.loc[ids, "arrival"].to_numpy(dtype=float)
    rows = []
    for rid in ids:
        t = times[rid]
        for n in range(1, len(t)):
            a, b = t[n - 1], t[n]
            mid = 0.5 * (a + b)
            on = (first <= mid) & (last >= mid)
            ctx = sum(p + np.searchsorted(times[j], mid) for j, p in zip(ids[on], prompt[on], strict=True))
            mixed = bool(np.any((sent < b) & (first > mid)))
            rows.append((int(rid), n, b - a, int(on.sum()), float(ctx), mixed))
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"batch": np.int64})


def decode_shapes(batch: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Plain decode steps as rows of the pricing core's shape array."""
    out = np.zeros((len(batch), SHAPE_SIZE))
    col = {f: i for i, f in enumerate(SHAPE_FIELDS)}
    b = np.asarray(batch, dtype=float)
    for f in ("num_tokens", "num_seqs", "decode_seqs", "num_sampled"):
        out[:, col[f]] = b
    out[:, col["decode_context"]] = np.asarray(context, dtype=float)
    return out


def priced(cost, gaps: pd.DataFrame) -> np.ndarray:
    """Each gap's step priced as a plain decode step by ``cost`` (``make_cost_model``'s)."""
    seconds, _ = cost.price(decode_shapes(gaps["batch"].to_numpy(), gaps["context"].to_numpy()))
    return seconds


def compare_steps(cost, gaps: pd.DataFrame) -> dict:
    """Measured against priced plain decode steps: in all, and by batch."""
    plain = gaps[(~gaps["mixed"]) & (gaps["batch"] > 0)].copy()
    if plain.empty:
        return {"n": 0}
    plain["priced_s"] = priced(cost, plain)
    out = {"n": len(plain), "measured_mean_s": float(plain["gap_s"].mean()),
           "priced_mean_s": float(plain["priced_s"].mean())}
    out["rel_diff"] = out["priced_mean_s"] / out["measured_mean_s"] - 1
    by = plain.groupby("batch").agg(n=("gap_s", "size"), measured=("gap_s", "mean"), priced=("priced_s", "mean"),
                                    context_per_seq=("context", "mean"))
    by["context_per_seq"] /= by.index
    out["by_batch"] = {int(b): {"n": int(r.n), "measured_mean_s": float(r.measured), "priced_mean_s": float(r.priced),
                                "context_per_seq": float(r.context_per_seq)} for b, r in by.iterrows()}
    return out


def _cost_of(folder: Path):
    import yaml

    from sim.pricing import make_cost_model
    from sim.scenario.load import scenario_from_dict

    frag = yaml.safe_load((folder / "profile.scenario.yaml").read_text())
    frag["cost"]["profile"] = str((folder / "profile.json").resolve())
    sc = scenario_from_dict({**frag, "name": "decode-steps", "workload": {"num_requests": 1}}, "<decode steps>",
                            folder)
    return make_cost_model(sc)


def main(argv=None) -> int:
    """Print, for each workload folder of a validation's results, measured vs priced plain
    decode steps (per run, and by batch for the first)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m endpoint.decode_steps RESULTS_DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    if not (folder / "profile.scenario.yaml").is_file():
        print(f"error: {folder}: expected a validation's results folder (profile.json, "
              "profile.scenario.yaml and one folder per workload)", file=sys.stderr)
        return 2
    try:
        cost = _cost_of(folder)
    except InputError as e:  # the profile's model (its config.json) or the profile itself
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in sorted(p.parent for p in folder.glob("*/run1")):
        for run in sorted(w.glob("run*")):
            g = decode_gaps(pd.read_parquet(run / "requests.parquet"), pd.read_parquet(run / "itl.parquet"))
            c = compare_steps(cost, g)
            if not c["n"]:
                continue
            print(f"{w.name:20s} {run.name}: {c['n']} plain decode steps, measured "
                  f"{c['measured_mean_s'] * 1e3:.1f} ms, priced {c['priced_mean_s'] * 1e3:.1f} ms "
                  f"({c['rel_diff']:+.1%})")
            if run.name == "run1":
                print("    batch: measured / priced ms (context per sequence)  "
                      + "  ".join(f"{b}: {v['measured_mean_s'] * 1e3:.1f}/{v['priced_mean_s'] * 1e3:.1f} "
                                  f"({v['context_per_seq']:.0f})" for b, v in c["by_batch"].items() if v["n"] >= 30))
    return 0


if __name__ == "__main__":
    sys.exit(main())
