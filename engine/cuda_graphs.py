"""Steps padded to a bucket and replayed from CUDA graphs.

An eager decode step of an 8B model launches 600-1,200 kernels from Python, which takes
longer than the GPU needs to run them; a captured graph replays them all in one call. A
:class:`GraphRunner` holds graphs for the buckets of a :class:`engine.buckets.GraphLadder`,
captured over persistent :class:`engine.step_buffers.StepBuffers` that every replay refills
with the padded step (:func:`engine.padding.pad_step`). Each graph ends by copying the
logits of its padded sample rows into one persistent fp32 buffer (so the graphs' own outputs
go back to their shared memory pool); the real rows are sliced back out of it.

A graph fixes what the attention kernel's host code decides, so a bucket has up to two:
one per query-tile size (:func:`kernels.attention.query_block`), picked at replay by the
same rule on the real step's tokens and rows as an eager step uses. The split-KV count is
the one for the longest context the engine can hold, as the context is not known at
capture; the kernel divides each sequence's own keys among the splits, so shorter contexts
stay correct (some splits just see no key).

Without capture (``capture=False``, any device) the runner does all of the same except the
capture and replay: it pads the step into the same buffers and runs the forward eagerly on
them. That is how the padding and bucket logic is tested on a CPU.
"""

from __future__ import annotations

import torch

from engine.buckets import Bucket, GraphLadder
from engine.model import LlamaModel
from engine.padding import HostStep, empty_step, pad_step
from engine.step_buffers import StepBuffers
from kernels.attention import query_block

GraphKey = tuple[Bucket, int]  # (bucket, attention rows per program)


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
        self.group = model.spec.num_heads // model.spec.num_kv_heads
        top = ladder.largest
        self.buffers = StepBuffers(model.device, top.tokens, ladder.max_seqs, max_blocks_per_seq)
        self.graphs: dict[GraphKey, torch.cuda.CUDAGraph] = {}
        self.logits = (torch.empty(ladder.max_seqs, model.spec.vocab_size, dtype=torch.float32,
                                   device=model.device) if capture else None)
        self.visited: set[GraphKey] = set()  # captured, or run padded
        self._pool = torch.cuda.graph_pool_handle() if capture else None

    @property
    def keys(self) -> list[GraphKey]:
        """Every (bucket, query tile) a step can need: the decode-sized tile everywhere, the
        prefill-sized one where a bucket holds 8 tokens or more (a one-row prefill)."""
        out = []
        for b in self.ladder.buckets:
            tiles = {query_block(b.tokens, b.tokens, self.group), query_block(b.tokens, 1, self.group)}
            out += [(b, t) for t in sorted(tiles)]
        return out

    def bucket_for(self, num_seqs: int, num_tokens: int) -> Bucket | None:
        return self.ladder.bucket_for(num_seqs, num_tokens)

    def key_for(self, step: HostStep, bucket: Bucket) -> GraphKey:
        return bucket, query_block(step.num_tokens, step.num_seqs, self.group)

    def prepare(self, key: GraphKey) -> None:
        """Capture ``key``'s graph (CUDA), or run it once padded (no capture); either way with
        an all-padding step, which reads and writes no KV."""
        if key in self.graphs:
            return
        bucket, tile = key
        self.buffers.load(pad_step(empty_step(), bucket))
        x = self.buffers.inputs(bucket, self.max_context, tile)
        if not self.capture:
            self._forward(x)
            self.visited.add(key)
            return
        side = torch.cuda.Stream(self.model.device)
        side.wait_stream(torch.cuda.current_stream(self.model.device))
        with torch.cuda.stream(side):
            self._forward(x)  # compiles what the graph needs, outside the capture
        torch.cuda.current_stream(self.model.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self.logits[: bucket.seqs].copy_(self._forward(x))
        self.graphs[key] = graph
        self.visited.add(key)

    def prepare_all(self) -> list[GraphKey]:
        """Every key, largest bucket first (the graphs share one memory pool, sized by the
        first)."""
        order = sorted(self.keys, reverse=True)
        for key in order:
            self.prepare(key)
        return order

    def run(self, step: HostStep, bucket: Bucket) -> torch.Tensor:
        """fp32 logits ``[S, V]`` of the step's sample rows. On CUDA a view of the persistent
        output buffer, valid until the next replay."""
        key = self.key_for(step, bucket)
        if self.capture and key not in self.graphs:
            self.prepare(key)  # a key the warm-up skipped: captured now, once
        self.buffers.load(pad_step(step, bucket))
        if self.capture:
            self.graphs[key].replay()
            logits = self.logits
        else:
            logits = self._forward(self.buffers.inputs(bucket, self.max_context, key[1]))
            self.visited.add(key)
        return logits[: step.num_samples]

    def _forward(self, x) -> torch.Tensor:
        return self.model.compute_logits(self.model(x, self.kv_layers), x.sample_idx)
