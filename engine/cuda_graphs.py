"""Steps padded to a bucket and replayed from CUDA graphs.

An eager decode step of an 8B model launches 600-1,200 kernels from Python, which takes
longer than the GPU needs to run them; a captured graph replays them all in one call. A
:class:`GraphRunner` holds one graph per bucket of a :class:`engine.buckets.GraphLadder`,
captured over persistent :class:`engine.step_buffers.StepBuffers` that every replay refills
with the padded step (:func:`engine.padding.pad_step`). Each graph ends by copying the
logits of its padded sample rows into one persistent fp32 buffer (so the graphs' own outputs
go back to their shared memory pool); the real rows are sliced back out of it.

Without capture (``capture=False``, any device) the runner does all of the same except the
capture and replay: it pads the step into the same buffers and runs the forward eagerly on
them. That is how the padding and bucket logic is tested on a CPU.

Graphs are captured with the split-KV count for the longest context the engine can hold, as
the context is not known at capture; the kernel divides each sequence's own keys among the
splits, so shorter contexts stay correct (some splits just see no key).
"""

from __future__ import annotations

import torch

from engine.buckets import Bucket, GraphLadder
from engine.model import LlamaModel
from engine.padding import HostStep, empty_step, pad_step
from engine.step_buffers import StepBuffers


class GraphRunner:
    def __init__(self, model: LlamaModel, kv_layers: list[tuple[torch.Tensor, torch.Tensor]],
                 ladder: GraphLadder, max_blocks_per_seq: int, max_context: int, capture: bool):
        if capture and model.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device; capture=False pads and runs eagerly")
        self.model = model
        self.kv_layers = kv_layers
        self.ladder = ladder
        self.max_context = max_context
        self.capture = capture
        top = ladder.largest
        self.buffers = StepBuffers(model.device, top.tokens, ladder.max_seqs, max_blocks_per_seq)
        self.graphs: dict[Bucket, torch.cuda.CUDAGraph] = {}
        self.logits = (torch.empty(ladder.max_seqs, model.spec.vocab_size, dtype=torch.float32,
                                   device=model.device) if capture else None)
        self.visited: set[Bucket] = set()  # buckets captured or run
        self._pool = torch.cuda.graph_pool_handle() if capture else None

    def bucket_for(self, num_seqs: int, num_tokens: int) -> Bucket | None:
        return self.ladder.bucket_for(num_seqs, num_tokens)

    def prepare(self, bucket: Bucket) -> None:
        """Capture ``bucket``'s graph (CUDA), or run it once padded (no capture); either way
        with an all-padding step, which reads and writes no KV."""
        if bucket in self.graphs:
            return
        self.buffers.load(pad_step(empty_step(), bucket))
        x = self.buffers.inputs(bucket, self.max_context)
        if not self.capture:
            self._forward(x)
            self.visited.add(bucket)
            return
        side = torch.cuda.Stream(self.model.device)
        side.wait_stream(torch.cuda.current_stream(self.model.device))
        with torch.cuda.stream(side):
            self._forward(x)  # compiles what the graph needs, outside the capture
        torch.cuda.current_stream(self.model.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self.logits[: bucket.seqs].copy_(self._forward(x))
        self.graphs[bucket] = graph
        self.visited.add(bucket)

    def prepare_all(self) -> list[Bucket]:
        """Every bucket, largest first (the graphs share one memory pool, sized by the first)."""
        order = sorted(self.ladder.buckets, reverse=True)
        for bucket in order:
            self.prepare(bucket)
        return order

    def run(self, step: HostStep, bucket: Bucket) -> torch.Tensor:
        """fp32 logits ``[S, V]`` of the step's sample rows. On CUDA a view of the persistent
        output buffer, valid until the next replay."""
        if self.capture and bucket not in self.graphs:
            self.prepare(bucket)  # a bucket the warm-up skipped: captured now, once
        self.buffers.load(pad_step(step, bucket))
        if self.capture:
            self.graphs[bucket].replay()
            logits = self.logits
        else:
            logits = self._forward(self.buffers.inputs(bucket, self.max_context))
            self.visited.add(bucket)
        return logits[: step.num_samples]

    def _forward(self, x) -> torch.Tensor:
        return self.model.compute_logits(self.model(x, self.kv_layers), x.sample_idx)
