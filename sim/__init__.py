"""servesim's simulator. The data path, in the order a run takes it:

- ``scenario``: the YAML schema, the model and GPU catalogs, the KV memory budget;
- ``traffic``: the requests (generated or replayed from traces) as numpy arrays;
- ``core``: the scheduling core — the cluster's state and every decision (routing, admission,
  chunk budgets, preemption, prefix cache, commit, KV transfer), compiled with numba;
- ``pricing``: the pricing core — a step's shape to seconds (roofline or profile), compiled;
- ``loops``: the compiled event loop (studies, every feature) and the SimPy loop (the readable
  reference, and the real-time driver of the engine), both calling the same core;
- ``results``: per-request and per-step records, metrics, summary, reports, written atomically;
- ``study`` and ``cli``: many runs at once, and the command line.

This package needs no torch; the real engine lives in ``engine`` and ``kernels``.
"""

__version__ = "0.1.0"
