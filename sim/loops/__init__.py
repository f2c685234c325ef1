"""The loops that move a cluster through time, over the same scheduling and pricing core.

``run.simulate`` picks one: ``compiled`` (an event loop compiled with numba: every feature, fast,
with steady decode stretches committed in one go, ``decode_runs``) or ``simpy_loop`` (SimPy
processes: the readable reference, and real time for the engine). Both take events in the same
order and give identical results.
"""
