"""``servesim execute``: run a scenario on the real engine, in real time.

The very same SimPy processes as a simulation run on ``simpy.rt.RealtimeEnvironment``:
requests arrive on the wall clock, the shared scheduling policy plans each step, the engine
runs it, and the step lasts as long as it really took. The results have the same files and
columns as ``servesim run``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import simpy.rt
import torch

from engine.executor import EngineExecutor
from sim.errors import ScenarioError
from sim.loops.run import RunResult, drive
from sim.scenario.load import apply_overrides, scenario_from_dict
from sim.scenario.schema import Scenario
from sim.vocab import CHUNKING

CPU_KV_BYTES = 256 * 1024**2


@dataclass(frozen=True)
class EngineSetup:
    device: str = "cpu"
    dtype: str | None = None  # default: fp32 on the CPU, the model's dtype on CUDA
    threads: int | None = 1  # torch threads on the CPU
    seed: int = 0
    warmup: bool = True
    weights: str | None = None  # a .gguf file or safetensors folder; default: random init
    graphs: str = "auto"  # CUDA graphs: auto | cuda | pad | off (see EngineExecutor)

    def torch_dtype(self, scenario: Scenario) -> str:
        if self.dtype:
            return self.dtype
        return "fp32" if self.device == "cpu" else scenario.model_spec.dtype


def check_executable(s: Scenario, source: str) -> None:
    """The engine runs one colocated replica with the plain paged-KV features."""
    problems = {
        "replicas": len(s.replica_specs) != 1,
        "disaggregation": s.disaggregation is not None,
        "hardware.pp": s.hardware.pp != 1,
        "hardware.tp": s.hardware.tp != 1,
        "scheduler.prefix_caching": s.scheduler.prefix_caching,
        "scheduler.preemption": s.scheduler.preemption != "recompute",
        "scheduler.speculative": s.scheduler.speculative is not None,
        "quantization": s.quantization.weights is not None or s.quantization.kv_cache is not None,
    }
    for field, bad in problems.items():
        if bad:
            raise ScenarioError(source, field,
                                "the engine executes one replica (tp=1, pp=1) with recompute "
                                "preemption, no prefix caching, speculation or quantization")
    if s.model_spec.is_moe:
        raise ScenarioError(source, "model", "the engine has no mixture-of-experts layers")
    if not s.model_spec.is_plain:
        raise ScenarioError(source, "model", f"the engine runs Llama-style layers only; {s.model_spec.name} has "
                            f"{s.model_spec.attention_kind} attention")


def prepare(scenario: Scenario, setup: EngineSetup, source: str = "<scenario>"
            ) -> tuple[Scenario, EngineExecutor]:
    """Load the model and size the KV cache; returns the scenario pinned to the engine's number
    of KV blocks (so a simulation of it schedules exactly as the engine did) and the executor."""
    check_executable(scenario, source)
    if setup.device == "cuda" and not torch.cuda.is_available():
        raise ScenarioError("--device", None, "cuda requested but no CUDA device is available")
    sched = scenario.scheduler
    seqs, tokens = sched.max_num_seqs, step_tokens(scenario)
    executor = EngineExecutor.load(
        setup.weights or scenario.model_spec, dtype=setup.torch_dtype(scenario), device=setup.device,
        seed=setup.seed, block_size=sched.block_size,
        kv_memory_bytes=_kv_bytes(scenario, setup), num_threads=setup.threads if setup.device == "cpu" else None,
        keep_tokens=False, graphs=setup.graphs, graph_max_seqs=min(seqs, 512),
        graph_max_tokens=min(tokens, 512))
    data = scenario.model_dump(mode="json", exclude={"base_dir"})
    data = apply_overrides(data, [f"hardware.kv_blocks={executor.num_blocks}"], source)
    pinned = scenario_from_dict(data, source, scenario.base_dir)
    if setup.warmup:
        report = executor.warmup(max_num_seqs=seqs, max_num_tokens=tokens)
        print(report.describe(), file=sys.stderr)
    return pinned, executor


def step_tokens(s: Scenario) -> int:
    """The most tokens one step of the scenario's policy can hold (at most the model's length
    for whole-prompt prefills)."""
    sched = s.scheduler
    if sched.policy in CHUNKING:
        return sched.chunk_size
    if sched.policy == "continuous":
        return sched.max_batched_tokens
    return s.model_spec.max_model_len


def _kv_bytes(s: Scenario, setup: EngineSetup) -> float:
    """KV memory: the scenario's budget on CUDA; on the CPU at most 256 MiB."""
    mem = s.memory
    budget = mem.num_blocks * mem.block_size * mem.kv_bytes_per_token
    return min(budget, CPU_KV_BYTES) if setup.device == "cpu" else budget


def execute(scenario: Scenario, setup: EngineSetup, source: str = "<scenario>",
            prepared: tuple[Scenario, EngineExecutor] | None = None) -> RunResult:
    pinned, executor = prepared or prepare(scenario, setup, source)
    env = simpy.rt.RealtimeEnvironment(factor=1.0, strict=False)

    def clock() -> float:
        return (time.monotonic() - env.real_start) + env.initial_time

    env.initial_time = env.now
    return drive(pinned, lambda _: executor, env=env, clock=clock)
