"""A scenario's requests, ready to send: arrivals, exact-length prompts, output lengths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from endpoint.loadgen import Request
from endpoint.prompts import PromptBuilder, WordVocab, word_vocab
from endpoint.server_info import identity
from sim.errors import InputError, ScenarioError
from sim.traffic import Workload, build_workload


@dataclass
class Plan:
    requests: list[Request]
    workload: Workload
    closed: int | None  # concurrency of a closed loop
    think_time_s: float


def closed_loop(scenario) -> tuple[int | None, float]:
    a = scenario.workload.arrival if scenario.workload.classes is None else None
    if a is not None and a.process == "closed":
        return a.concurrency, a.think_time_s
    return None, 0.0


def tokenizer_for(url: str, tokenizer: str | None) -> str:
    """``--tokenizer``, or the served model's folder when the server runs on this machine."""
    if tokenizer:
        return tokenizer
    for m in identity(url).get("models", []):
        root = m.get("root")
        if root and (Path(root) / "tokenizer.json").is_file():
            return root
    raise InputError("--tokenizer", None, "give the model's tokenizer.json (or its folder): the "
                     "server does not name a local model folder that has one")


def plan(scenario, vocab: WordVocab, *, api: str = "completions", chat_overhead: int = 0,
         seed: int | None = None) -> Plan:
    """The scenario's requests with prompts of exactly their ``prompt_len`` tokens (for chat:
    minus the chat template's ``chat_overhead`` tokens, so that the server sees that many)."""
    w = build_workload(scenario)
    closed, think = closed_loop(scenario)
    if closed is None and scenario.workload.classes is not None:
        for i, c in enumerate(scenario.workload.classes):
            if c.arrival.process == "closed":
                raise ScenarioError(scenario.name, f"workload.classes[{i}].arrival",
                                    "closed loops run with single-class traffic only")
    builder = PromptBuilder(vocab, scenario.scheduler.block_size,
                            scenario.seed if seed is None else seed)
    reqs = []
    for i in range(len(w)):
        n = int(w.prompt_len[i])
        blocks = w.block_ids(i) if w.prefix_offsets is not None else None
        if api == "chat":
            body = max(n - chat_overhead, 1)
            ids = builder.prompt(i, body, blocks)
            prompt: list[int] | str = builder.text(ids)
        else:
            prompt = [int(x) for x in builder.prompt(i, n, blocks)]
        reqs.append(Request(i, float(w.arrival[i]), prompt, n, int(w.output_len[i])))
    return Plan(reqs, w, closed, think)


def load_vocab(url: str, tokenizer: str | None) -> WordVocab:
    return word_vocab(tokenizer_for(url, tokenizer))


def check_fits(p: Plan, max_model_len: int | None, source: str, where: str = "max_model_len") -> None:
    """Refuse a plan with a request longer than one sequence's context on the server (``where``:
    what the server published it as)."""
    if not max_model_len:
        return
    total = np.asarray(p.workload.prompt_len) + np.asarray(p.workload.output_len)
    bad = int((total > max_model_len).sum())
    if bad:
        raise ScenarioError(source, "workload.prompt_len",
                            f"{bad} request(s) need more than the {max_model_len} tokens of prompt + output "
                            f"the server gives one sequence ({where})")
