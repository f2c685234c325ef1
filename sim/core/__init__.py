"""The scheduling core: every decision the simulated cluster makes, written once.

State (``state``): the request table's columns (``requests``) and each engine's settings,
counters, running requests and planned step, held in a few typed structures (numba StructRefs
over numpy arrays, ``jit``). Decisions, as compiled functions over that state:

- ``router``: which replica (and pipelined engine) a request goes to;
- ``queues``: the waiting queues (by priority level), swapped-out and remote queues;
- ``admission``: who joins the batch from the queue, who is turned away;
- ``kvblocks`` / ``blocktable``: KV block accounting and the prefix cache (LRU);
- ``preemption``: blocks for the step's new tokens, preemption by recompute or swap;
- ``policies``: static, continuous and chunked-prefill scheduling → the step's rows and shape;
- ``commit``: a finished step's outcome (tokens, speculative drafts, finishes, hand-overs, log);
- ``disagg``: KV caches handed from prefill to decode replicas (their costs: sim/pricing/links);
- ``handlers``: what each event means (an engine's turn, a step's end, an arrival, a KV landing,
  the outbox), in the order every loop follows, as effects for the loop's clock;
- ``plan``: the BatchPlan (the contract with executors) and a step's shape;
- ``calls`` / ``standalone``: the core as Python calls (the SimPy loop, the engine, tests).
"""
