"""The compiled loop: the common scenarios, simulated with numba, identical to the SimPy loop.

Capacity planning runs thousands of simulations, and the Python step loop spends ~150 µs of
interpreter and numpy call overhead per event. For colocated replicas under continuous
batching or chunked prefill, priced by the roofline or a calibration profile (the bulk of
planning runs), the same policies and cost formulas are compiled into one loop (``kernel.py``,
``costs.py``); everything else (static batching, prefix caching, swap, speculation, PP, MoE,
disaggregation, the real engine) runs in SimPy. ``simulation.loop`` picks: ``auto`` (compiled where it applies),
``simpy`` (the reference), or ``compiled`` (an error names what it cannot do).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from sim.core.requests import RequestTable
from sim.results.steplog import COLUMNS, ordered_frame

LOG_CHUNK_ROWS = 1 << 18
ROUTERS = {"round-robin": 0, "least-outstanding": 1, "least-kv": 2}


def unsupported(scenario) -> str | None:
    """Why the compiled loop cannot run ``scenario`` (None when it can); any traffic runs."""
    if scenario.disaggregation is not None:
        return "disaggregated prefill/decode pools need the SimPy loop"
    if scenario.router.policy not in ROUTERS:
        return f"router {scenario.router.policy!r} needs the SimPy loop ({', '.join(ROUTERS)} only)"
    if scenario.model_spec.is_moe:
        return "mixture-of-experts models need the SimPy loop"
    for spec in scenario.replica_specs:
        s, hw = spec.scheduler, spec.hardware
        if s.policy not in ("continuous", "chunked-prefill"):
            return f"scheduler.policy {s.policy!r} needs the SimPy loop"
        for name, on in (("prefix_caching", s.prefix_caching), ("speculative", s.speculative is not None),
                         ("preemption: swap", s.preemption == "swap")):
            if on:
                return f"scheduler.{name} needs the SimPy loop"
        if hw.pp > 1:
            return "pipeline parallelism (hardware.pp > 1) needs the SimPy loop"
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed (pip install numba)"
    return None


def _replica_parameters(scenario) -> np.ndarray:
    """Each replica's scheduler and memory settings (ints)."""
    from sim.loops.compiled import kernel as k

    specs = scenario.replica_specs
    ip = np.zeros((len(specs), 7), dtype=np.int64)
    for spec in specs:
        s, mem, i = spec.scheduler, spec.memory, spec.index
        ip[i, k.POLICY] = k.CHUNKED if s.policy == "chunked-prefill" else k.CONTINUOUS
        ip[i, k.NUM_BLOCKS] = mem.num_blocks
        ip[i, k.BLOCK_SIZE] = mem.block_size
        ip[i, k.MAX_SEQS] = s.max_num_seqs
        ip[i, k.MAX_BATCHED] = s.max_batched_tokens
        ip[i, k.CHUNK] = s.chunk_size
        ip[i, k.WATERMARK] = int(s.watermark * mem.num_blocks)  # Policy._watermark_blocks
    return ip


@dataclass
class LoopState:
    """Everything the compiled loop carries from one call to the next (it returns whenever a
    chunk of the step log is full), as arrays it updates in place."""

    running: np.ndarray  # [replicas, max_num_seqs] ids in admission order
    nrun: np.ndarray
    q: np.ndarray  # [replicas × levels, capacity] ring buffers: the waiting queues (grown as needed)
    qhead: np.ndarray
    qlev: np.ndarray  # requests waiting at each replica's each priority level
    qlen: np.ndarray  # requests waiting at each replica
    free: np.ndarray  # free KV blocks
    preempted: np.ndarray  # someone was preempted since the last plan
    p_ids: np.ndarray  # the step under way: its rows, new tokens, context, sampling rows
    p_new: np.ndarray
    p_comp: np.ndarray
    p_samp: np.ndarray
    p_n: np.ndarray
    need: np.ndarray  # scratch: new blocks per row
    start: np.ndarray
    duration: np.ndarray
    used_at: np.ndarray  # blocks used and queue length when the step started
    queued_at: np.ndarray
    ev_kind: np.ndarray  # each replica's pending event: none, wake-up or step end
    ev_time: np.ndarray
    ev_eid: np.ndarray  # SimPy's tie-break: the order events were created in
    listening: np.ndarray  # idle, waiting for an arrival
    clock_i: np.ndarray  # eid counter, round-robin turn, next arrival, its event, started
    clock_f: np.ndarray  # the next arrival's time, now

    def arrays(self) -> list[np.ndarray]:
        return [getattr(self, f.name) for f in fields(self)]

    @classmethod
    def new(cls, ip: np.ndarray, levels: int) -> LoopState:
        from sim.loops.compiled import kernel as k

        R = len(ip)
        cap = int(ip[:, k.MAX_SEQS].max())
        ints = lambda *shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
        return cls(running=ints(R, cap), nrun=ints(R), q=ints(R * levels, 64), qhead=ints(R * levels),
                   qlev=ints(R * levels), qlen=ints(R),
                   free=ip[:, k.NUM_BLOCKS].copy(), preempted=np.zeros(R, dtype=np.bool_),
                   p_ids=ints(R, cap), p_new=ints(R, cap), p_comp=ints(R, cap),
                   p_samp=np.zeros((R, cap), dtype=np.bool_), p_n=ints(R), need=ints(cap),
                   start=np.zeros(R), duration=np.zeros(R), used_at=ints(R), queued_at=ints(R),
                   ev_kind=ints(R), ev_time=np.zeros(R), ev_eid=ints(R),
                   listening=np.zeros(R, dtype=np.bool_), clock_i=ints(6), clock_f=np.zeros(2))


def run_compiled(scenario, table: RequestTable, progress: Callable[[int], None] | None = None
                 ) -> tuple[pd.DataFrame, int, list]:
    """Simulate every request of ``table`` (mutated in place, as the SimPy loop does).
    Returns the step log, ordered as StepLog.frame orders it, the number of steps, and each
    replica's cost model (a profile's holds its extrapolation counts, for the warnings).
    ``progress`` hears the last request that has arrived, every LOG_CHUNK_ROWS steps."""
    from sim.loops.compiled.costs import encode, fold_counts
    from sim.loops.compiled.kernel import simulate_kernel
    from sim.pricing import make_cost_model

    ip = _replica_parameters(scenario)
    costs = [make_cost_model(scenario, spec) for spec in scenario.replica_specs]
    cost_arrays = encode(costs)
    t = table
    # Priority levels, lowest value first (WaitQueue serves them in that order).
    priorities = np.unique(t.priority)
    level = np.searchsorted(priorities, t.priority).astype(np.int64)
    state = LoopState.new(ip, max(len(priorities), 1))
    chunks_i, chunks_f = [], []
    finished = False
    while not finished:
        log_i = np.empty((LOG_CHUNK_ROWS, 7), dtype=np.int32)
        log_f = np.empty((LOG_CHUNK_ROWS, 2), dtype=np.float64)
        rows, finished, state.q = simulate_kernel(
            t.arrival, t.prompt_len, t.output_len, t.num_tokens, t.num_computed, t.num_generated,
            t.num_blocks, t.status, t.reject_reason, t.replica, t.preemptions, t.first_scheduled,
            t.first_token, t.completion, ip, scenario.model_spec.max_model_len,
            ROUTERS[scenario.router.policy], *cost_arrays.arrays(), level, *state.arrays(), log_i,
            log_f)
        chunks_i.append(log_i[:rows])
        chunks_f.append(log_f[:rows])
        if progress is not None:
            progress(t.n - 1 if finished else int(state.clock_i[2]) - 1)
    ints = iter(range(7))
    cols = {}
    for name, dtype in COLUMNS.items():
        if name in ("start", "duration"):
            j = 0 if name == "start" else 1
            cols[name] = np.concatenate([c[:, j] for c in chunks_f])
        else:
            j = next(ints)
            cols[name] = np.concatenate([c[:, j] for c in chunks_i]).astype(dtype, copy=False)
    del chunks_i, chunks_f
    fold_counts(costs, cost_arrays)
    return ordered_frame(cols), len(cols["start"]), costs


def compiled_this_process() -> bool:
    """Whether this process had to compile the loop (no usable cached build)."""
    from sim.loops.compiled.kernel import simulate_kernel

    return sum(simulate_kernel.stats.cache_misses.values()) > 0

