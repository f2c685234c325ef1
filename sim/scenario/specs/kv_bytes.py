"""What a request's KV cache weighs, as the engines hold it: one rule, in plain arithmetic, used
by the model description (``ModelSpec.kv_bytes_of_request``) and compiled as it stands for the
core's pricing of a disaggregated hand-off (sim/pricing/links.py). This file is part of the
compiled core's build stamp (sim/core/buildcache.py: CORE_FILES), so a change here rebuilds it.
"""

from __future__ import annotations


def kv_bytes_held(tokens: int, full_bytes: float, windowed_bytes: float, window: int, chunked: bool,
                  block_size: int, state_bytes: float) -> float:
    """KV bytes of a request of ``tokens`` tokens: ``full_bytes`` per token for the layers that
    keep every token (full attention, MLA), ``windowed_bytes`` per token for the windowed layers'
    tokens still held, and the linear-attention / SSM layers' fixed ``state_bytes``.

    A windowed layer frees whole blocks behind its window, as vLLM V1 does: a sliding window of
    W skips the first ``tokens - W + 1`` tokens (SlidingWindowManager), chunked local attention
    the chunks before the current one; the blocks wholly skipped are gone, so it holds at most
    the window plus a block."""
    total = tokens * full_bytes
    if windowed_bytes != 0.0:
        skipped = (tokens // window) * window if chunked else max(tokens - window + 1, 0)
        total += (tokens - (skipped // block_size) * block_size) * windowed_bytes
    return total + state_bytes
