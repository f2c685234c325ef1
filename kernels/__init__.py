"""servesim kernels: Triton kernels with PyTorch reference twins behind one dispatcher.

Every public function takes ``impl="auto" | "triton" | "torch"`` (see ``kernels.dispatch``):
``auto`` runs Triton on CUDA tensors and the reference elsewhere.
"""

from kernels.activation import silu_and_mul
from kernels.attention import paged_attention
from kernels.dispatch import HAS_TRITON, select_impl
from kernels.kv_cache import write_kv_cache
from kernels.norm import fused_add_rms_norm, rms_norm
from kernels.rotary import build_cos_sin_cache, rotary_embedding
from kernels.sampling import sample

__all__ = [
    "HAS_TRITON",
    "build_cos_sin_cache",
    "fused_add_rms_norm",
    "paged_attention",
    "rms_norm",
    "rotary_embedding",
    "sample",
    "select_impl",
    "silu_and_mul",
    "write_kv_cache",
]
