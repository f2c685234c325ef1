"""Persistent device buffers for a step's inputs: the fixed addresses a CUDA graph reads.

:meth:`StepBuffers.load` copies a padded :class:`engine.padding.HostStep` into them (on CUDA
through pinned host memory, asynchronously) and :meth:`StepBuffers.inputs` returns
:class:`engine.model.StepInputs` views sized to a bucket. Block tables keep one fixed width
(the longest sequence the engine can hold), so their stride is the same in every step; the
columns past a row's length are never read.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.buckets import Bucket
from engine.model import StepInputs
from engine.padding import HostStep

_FIELDS = {  # name: (dtype, fill)
    "input_ids": (torch.int64, 0),
    "positions": (torch.int64, 0),
    "slot_mapping": (torch.int64, -1),
    "query_start_loc": (torch.int32, 0),
    "seq_lens": (torch.int32, 0),
    "sample_idx": (torch.int64, 0),
    "block_tables": (torch.int32, 0),
}


class StepBuffers:
    def __init__(self, device: torch.device, max_tokens: int, max_seqs: int, max_blocks_per_seq: int):
        self.device = torch.device(device)
        self.max_tokens, self.max_seqs, self.width = max_tokens, max_seqs, max_blocks_per_seq
        shapes = {"input_ids": (max_tokens,), "positions": (max_tokens,), "slot_mapping": (max_tokens,),
                  "query_start_loc": (max_seqs + 1,), "seq_lens": (max_seqs,), "sample_idx": (max_seqs,),
                  "block_tables": (max_seqs, max_blocks_per_seq)}
        self.dev = {k: torch.full(shapes[k], fill, dtype=dt, device=self.device)
                    for k, (dt, fill) in _FIELDS.items()}
        pinned = self.device.type == "cuda"
        # Pinned staging, flat: a step's [B, W] block table is one contiguous run of it.
        self.host = ({k: torch.zeros(int(np.prod(shapes[k])), dtype=dt, pin_memory=True)
                      for k, (dt, _) in _FIELDS.items()} if pinned else None)
        self._copied: torch.cuda.Event | None = None

    def inputs(self, bucket: Bucket, max_context: int | None = None,
               query_block: int | None = None) -> StepInputs:
        """Views of the buffers shaped for ``bucket`` (the same tensors every time)."""
        d, t, b = self.dev, bucket.tokens, bucket.seqs
        return StepInputs(
            input_ids=d["input_ids"][:t], positions=d["positions"][:t],
            query_start_loc=d["query_start_loc"][: b + 1], seq_lens=d["seq_lens"][:b],
            block_tables=d["block_tables"][:b], slot_mapping=d["slot_mapping"][:t],
            sample_idx=d["sample_idx"][:b], max_context=max_context, query_block=query_block,
        )  # fmt: skip

    def load(self, step: HostStep) -> None:
        """Copy a padded step into the buffers (no device sync on CUDA)."""
        w = step.block_tables.shape[1]
        if (step.num_tokens > self.max_tokens or step.num_seqs > self.max_seqs or w > self.width
                or step.num_samples > self.max_seqs):
            raise ValueError(f"step ({step.num_tokens} tokens, {step.num_seqs} rows, {w} blocks) "
                             f"exceeds the buffers ({self.max_tokens}, {self.max_seqs}, {self.width})")
        arrays = {k: getattr(step, k) for k in _FIELDS}
        if self.host is None:
            for k, a in arrays.items():
                self._region(self.dev[k], a).copy_(torch.from_numpy(np.ascontiguousarray(a)))
            return
        if self._copied is not None:
            self._copied.synchronize()  # the previous step's copies have left the pinned memory
        for k, a in arrays.items():
            src = self.host[k][: a.size].view(a.shape)
            src.numpy()[...] = a
            self._region(self.dev[k], a).copy_(src, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()

    @staticmethod
    def _region(buf: torch.Tensor, a: np.ndarray) -> torch.Tensor:
        return buf[: a.shape[0]] if a.ndim == 1 else buf[: a.shape[0], : a.shape[1]]
