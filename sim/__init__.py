"""servesim's simulator: scenarios, workloads, scheduling policies, cost models, metrics.

This package needs no torch; the real engine lives in ``engine`` and ``kernels``.
"""

__version__ = "0.1.0"
