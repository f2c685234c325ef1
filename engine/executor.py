"""The real engine behind the Executor protocol: run a BatchPlan on a model, time it.

The engine keeps every request's token ids. Row ``i`` of a plan processes tokens
``[num_computed[i], num_computed[i] + num_new_tokens[i])`` of request ``req_ids[i]``'s list;
rows that sample append their new token. The RequestTable is read, never written: the
scheduling policy commits each step.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.buckets import GraphLadder
from engine.cuda_graphs import GraphRunner
from engine.kv_cache import BlockManager, KVCache, num_blocks_for_budget
from engine.model import LlamaModel, OpTimer, no_timer, torch_dtype
from engine.padding import HostStep
from engine.timing import synchronize
from engine.warmup import WarmupReport, warm_up
from engine.weights import load_model
from kernels import dispatch, sample
from kernels.dispatch import HAS_TRITON
from sim.core.plan import BatchPlan, StepResult
from sim.core.requests import RequestTable
from sim.scenario.specs import ModelSpec

GRAPH_MODES = ("auto", "cuda", "pad", "off")

MiB = 1024**2


@dataclass(frozen=True)
class SamplingParams:
    """Greedy by default. ``seed`` gives the request its own random stream, so its tokens do
    not depend on what it is batched with."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    seed: int | None = None


GREEDY = SamplingParams()


class _Request:
    """Token ids of one request (prompt then generated), in a growable array."""

    def __init__(self, prompt: np.ndarray, capacity: int, sampling: SamplingParams,
                 device: torch.device):
        self.ids = np.zeros(max(capacity, len(prompt) + 1), dtype=np.int64)
        self.ids[: len(prompt)] = prompt
        self.n = len(prompt)
        self.prompt_len = len(prompt)
        self.sampling = sampling
        self.generator = None
        if sampling.seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(sampling.seed)

    def append(self, token: int) -> None:
        if self.n == len(self.ids):
            self.ids = np.concatenate([self.ids, np.zeros_like(self.ids)])
        self.ids[self.n] = token
        self.n += 1


class EngineExecutor:
    """Runs BatchPlans on ``model`` over a paged KV cache; ``run`` returns measured wall time.

    KV blocks: ``num_blocks`` if given, else as many as fit in ``kv_memory_bytes`` (default:
    90% of free GPU memory on CUDA, 256 MiB on CPU). Give the scheduler ``self.num_blocks``.
    Requests with no prompt registered by :meth:`add_request` get ``table.prompt_len`` random
    ids, seeded by ``(seed, rid)``. With ``ignore_eos`` off, a sampled id in
    ``eos_token_ids`` marks the row in ``StepResult.stopped``. With ``keep_tokens`` off, a
    request's token ids are dropped once a plan frees it (long timing runs).

    ``graphs``: ``"cuda"`` pads steps of at most ``graph_max_seqs`` rows and
    ``graph_max_tokens`` tokens to a bucket of the ladder (:mod:`engine.buckets`) and replays
    them from CUDA graphs (:mod:`engine.cuda_graphs`), others run eagerly; ``"pad"`` does the
    same without capturing (any device: the CPU test of the padding); ``"off"`` runs every
    step eagerly; ``"auto"`` (default) is ``"cuda"`` on a CUDA device with the Triton kernels,
    ``"off"`` elsewhere. Steps run with a timer, or asked for every token's logits, are eager.
    """

    def __init__(self, model: LlamaModel, *, block_size: int = 16, num_blocks: int | None = None,
                 kv_memory_bytes: float | None = None, kv_dtype: str | torch.dtype | None = None,
                 ignore_eos: bool = True, eos_token_ids: Sequence[int] | int | None = None,
                 seed: int = 0, num_threads: int | None = None, timer: OpTimer | None = None,
                 keep_tokens: bool = True, graphs: str = "auto", graph_max_seqs: int = 512,
                 graph_max_tokens: int = 512, graph_sizes: Sequence[int] | None = None):
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.model = model
        self.spec = model.spec
        self.device = model.device
        self.seed = seed
        self.ignore_eos = ignore_eos
        self.keep_tokens = keep_tokens
        eos = [] if eos_token_ids is None else np.atleast_1d(eos_token_ids).tolist()
        self.eos_token_ids = np.asarray(eos, dtype=np.int64)
        kv_dt = torch_dtype(kv_dtype) if kv_dtype is not None else model.dtype
        if num_blocks is None:
            if kv_memory_bytes is None:
                kv_memory_bytes = (0.9 * torch.cuda.mem_get_info(self.device)[0]
                                   if self.device.type == "cuda" else 256 * MiB)
            num_blocks = num_blocks_for_budget(self.spec, kv_memory_bytes, block_size, kv_dt)
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.kv = KVCache(self.spec, num_blocks, block_size, kv_dt, self.device)
        self.blocks = BlockManager(num_blocks, block_size)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.requests: dict[int, _Request] = {}
        self._pending: dict[int, tuple[np.ndarray | None, SamplingParams]] = {}
        self.timer = timer or no_timer
        self.step_counts: Counter[str] = Counter()  # steps run from a graph bucket / eagerly
        self.last_warmup: WarmupReport | None = None
        self.graph_mode = self._graph_mode(graphs)
        self.graph_runner: GraphRunner | None = None
        if self.graph_mode != "off":
            ladder = GraphLadder.build(graph_max_seqs, graph_max_tokens, graph_sizes)
            width = min(num_blocks, -(-self.spec.max_model_len // block_size))
            self.graph_runner = GraphRunner(model, self.kv.layers, ladder, width, self.max_context,
                                            capture=self.graph_mode == "cuda")

    def _graph_mode(self, graphs: str) -> str:
        if graphs not in GRAPH_MODES:
            raise ValueError(f"graphs must be one of {GRAPH_MODES}, got {graphs!r}")
        # Compiled Triton only: the interpreter (TRITON_INTERPRET=1) runs kernels on the host.
        on_triton = HAS_TRITON and not dispatch._INTERPRETED_AT_IMPORT and self.model.impl in ("auto", "triton")
        if graphs == "auto":
            return "cuda" if self.device.type == "cuda" and on_triton else "off"
        if graphs == "cuda" and (self.device.type != "cuda" or not on_triton):
            raise ValueError("CUDA graphs need a CUDA device and the Triton kernels (the PyTorch "
                             "reference attention syncs with the host); graphs='pad' pads without them")
        return graphs

    @classmethod
    def load(cls, source: ModelSpec | str | Path, *, dtype: str | torch.dtype | None = None,
             device: str | torch.device = "cpu", seed: int = 0, impl: str = "auto",
             **kw) -> EngineExecutor:
        """An executor over ``engine.weights.load_model(source)``: a spec or catalog name
        (random weights), a ``.gguf`` file or a safetensors folder."""
        model = load_model(source, seed=seed, dtype=dtype, device=device, impl=impl)
        return cls(model, seed=seed, **kw)

    def warmup(self, prompt_len: int | None = None, decode_steps: int = 1, *,
               max_num_seqs: int | None = None, max_num_tokens: int | None = None) -> WarmupReport:
        """Meet every kernel variant and graph bucket a run can meet before timing anything
        (:mod:`engine.warmup`): Triton compiles, graph captures, first-use costs. Steps of up
        to ``max_num_seqs`` rows and ``max_num_tokens`` tokens (``prompt_len`` is the old name
        of the latter; defaults: 256 rows and 8,192 tokens on CUDA, 32 and 512 on a CPU, at
        most the model's length); each shape runs ``decode_steps`` times. Writes no KV and
        leaves no request or block behind. Returns (and keeps in ``last_warmup``) what it did
        and how long it took."""
        if self.requests or self.blocks.tables:
            raise RuntimeError("warm up before the first request")
        cuda = self.device.type == "cuda"
        tokens = max_num_tokens or prompt_len or (8192 if cuda else 512)
        seqs = max_num_seqs or (256 if cuda else 32)
        tokens = max(1, min(tokens, self.spec.max_model_len))
        self.last_warmup = warm_up(self, max_num_seqs=seqs, max_num_tokens=tokens, repeats=decode_steps)
        return self.last_warmup

    # -- configuration -------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.blocks.num_blocks

    @property
    def block_size(self) -> int:
        return self.blocks.block_size

    @property
    def max_context(self) -> int:
        """The longest sequence the engine can hold (model length, KV capacity)."""
        return min(self.spec.max_model_len, self.num_blocks * self.block_size)

    @property
    def timer(self) -> OpTimer:
        return self._timer

    @timer.setter
    def timer(self, timer: OpTimer | None) -> None:
        """Time the executor's own phases (``prepare_inputs``, ``sample``) and the model's ops."""
        self._timer = timer or no_timer
        self.model.timer = self._timer

    def add_request(self, rid: int, prompt_ids: Sequence[int] | None = None,
                    sampling: SamplingParams | None = None) -> None:
        """Register a request's prompt and sampling before it is first scheduled."""
        prompt = None if prompt_ids is None else np.asarray(prompt_ids, dtype=np.int64)
        self._pending[int(rid)] = (prompt, sampling or GREEDY)

    def token_ids(self, rid: int) -> list[int]:
        """Prompt and generated ids of ``rid`` so far."""
        r = self.requests[int(rid)]
        return r.ids[: r.n].tolist()

    def generated_tokens(self, rid: int) -> list[int]:
        r = self.requests.get(int(rid))
        return [] if r is None else r.ids[r.prompt_len : r.n].tolist()

    def release(self, rid: int) -> None:
        """Forget a request: its tokens, and its KV blocks should no plan free them."""
        self.blocks.free(int(rid))
        self.requests.pop(int(rid), None)
        self._pending.pop(int(rid), None)

    def reset(self) -> None:
        """Forget every request and free every block (the cache contents are left as they are)."""
        for rid in list(self.blocks.tables):
            self.blocks.free(rid)
        self.requests.clear()
        self._pending.clear()

    # -- one step ------------------------------------------------------------------------------
    def run(self, plan: BatchPlan, table: RequestTable) -> StepResult:
        """Execute one step: memory actions, forward, sampling; wall time incl. input prep."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            reqs, logits = self._forward(plan, table, all_tokens=False)
            stopped = np.zeros(plan.num_seqs, dtype=bool)
            if reqs:
                with self.timer("sample"):
                    sampling = [r for r, s in zip(reqs, plan.samples.tolist(), strict=True) if s]
                    tokens = self._sample(logits, sampling).cpu().numpy()
                for r, tok in zip(sampling, tokens.tolist(), strict=True):
                    r.append(tok)
                if not self.ignore_eos and self.eos_token_ids.size:
                    stopped[plan.samples] = np.isin(tokens, self.eos_token_ids)
            synchronize(self.device)
        return StepResult(duration=time.perf_counter() - t0, stopped=stopped)

    def forward(self, plan: BatchPlan, table: RequestTable, all_tokens: bool = False
                ) -> torch.Tensor:
        """Run a step without sampling; fp32 logits of the sampling rows ``[S, V]``, or of
        every token of the step ``[T, V]``. KV is written as in :meth:`run`."""
        with torch.inference_mode():
            return self._forward(plan, table, all_tokens)[1].clone()  # (a graph's output is reused)

    def _forward(self, plan: BatchPlan, table: RequestTable, all_tokens: bool
                 ) -> tuple[list[_Request], torch.Tensor]:
        self.blocks.apply(plan)
        if not self.keep_tokens:
            for rid in plan.freed.tolist():
                self.requests.pop(rid, None)
        if plan.num_seqs == 0:
            return [], torch.zeros(0, self.spec.vocab_size, device=self.device)
        with self.timer("prepare_inputs"):
            reqs = [self._request(rid, table) for rid in plan.req_ids.tolist()]
            host = self._host_step(plan, reqs)
        return reqs, self._logits(host, all_tokens)

    def _logits(self, host: HostStep, all_tokens: bool = False) -> torch.Tensor:
        """fp32 logits of the step's sample rows (every token's with ``all_tokens``): replayed
        from the smallest graph bucket that holds the step, else eagerly."""
        runner = self.graph_runner
        if runner is not None and not all_tokens and self._timer is no_timer:
            bucket = runner.bucket_for(host.num_seqs, host.num_tokens)
            if bucket is not None:
                self.step_counts["graph"] += 1
                return runner.run(host, bucket)
        self.step_counts["eager"] += 1
        with self.timer("prepare_inputs"):
            inputs = host.to_device(self.device)
        hidden = self.model(inputs, self.kv.layers)
        rows = inputs.sample_idx
        if all_tokens:
            rows = torch.arange(hidden.shape[0], device=self.device)
        return self.model.compute_logits(hidden, rows)

    def _request(self, rid: int, table: RequestTable) -> _Request:
        r = self.requests.get(rid)
        if r is not None:
            return r
        prompt, sampling = self._pending.pop(rid, (None, GREEDY))
        want = int(table.prompt_len[rid])
        if prompt is None:
            rng = np.random.default_rng([self.seed, rid])
            prompt = rng.integers(0, self.spec.vocab_size, want, dtype=np.int64)
        elif len(prompt) != want:
            raise ValueError(f"request {rid}: {len(prompt)} prompt ids but the table says {want}")
        capacity = want + int(table.output_len[rid]) + 1
        r = self.requests[rid] = _Request(prompt, capacity, sampling, self.device)
        return r

    def _host_step(self, plan: BatchPlan, reqs: list[_Request]) -> HostStep:
        new, done = plan.num_new_tokens, plan.num_computed
        ends = done + new
        chunks = []
        for r, a, b, s in zip(reqs, done.tolist(), ends.tolist(), plan.samples.tolist(),
                                  strict=True):
            if b > r.n or (s and b != r.n):
                raise RuntimeError(
                    f"plan row wants tokens [{a}, {b}) (sampling={s}) of a request with {r.n}"
                )
            chunks.append(r.ids[a:b])
        qsl = np.zeros(len(new) + 1, dtype=np.int64)
        np.cumsum(new, out=qsl[1:])
        positions = np.arange(qsl[-1]) - np.repeat(qsl[:-1] - done, new)
        block_table = self.blocks.block_table(plan.req_ids, ends)
        slots = self.blocks.slot_mapping(block_table, done, new)
        return HostStep(
            input_ids=np.concatenate(chunks), positions=positions, query_start_loc=qsl,
            seq_lens=ends, block_tables=block_table, slot_mapping=slots,
            sample_idx=qsl[1:][plan.samples] - 1, max_context=int(ends.max(initial=0)),
        )  # fmt: skip

    def _sample(self, logits: torch.Tensor, reqs: list[_Request]) -> torch.Tensor:
        """Seeded requests draw from their own generators, the rest share the engine's."""
        if not reqs:
            return torch.zeros(0, dtype=torch.int64)
        impl = self.model.impl
        params = [r.sampling for r in reqs]

        def draw(rows: list[int], gen: torch.Generator) -> torch.Tensor:
            p = [params[i] for i in rows]
            return sample(
                logits if len(rows) == logits.shape[0] else logits[rows],
                torch.tensor([x.temperature for x in p], dtype=torch.float32, device=self.device),
                torch.tensor([x.top_k for x in p], dtype=torch.int64, device=self.device),
                torch.tensor([x.top_p for x in p], dtype=torch.float32, device=self.device),
                generator=gen, impl=impl,
            )

        own = [i for i, r in enumerate(reqs) if r.generator is not None]
        if not own:
            return draw(list(range(len(reqs))), self.generator)
        out = torch.empty(len(reqs), dtype=torch.int64, device=self.device)
        shared = [i for i, r in enumerate(reqs) if r.generator is None]
        if shared:
            out[shared] = draw(shared, self.generator)
        for i in own:
            out[i : i + 1] = draw([i], reqs[i].generator)
        return out
