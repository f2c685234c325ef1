"""Values as JSON can hold them: NaN and infinity become null, numpy scalars plain numbers."""

from __future__ import annotations

import math

import numpy as np


def json_safe(v):
    """``v`` with dicts, lists and tuples walked; NaN/inf → None, numpy scalars → Python."""
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [json_safe(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
