"""The API server's time per request (engine.request_overhead_s, RunTime.FRONTEND): a request
reaches the router that long after it is sent; its arrival stays its send, so TTFT and E2E carry
the overhead and TPOT does not; a closed loop's user sends again after thinking."""

from __future__ import annotations

import numpy as np

from sim.loops.run import simulate
from tests.sim.helpers import scenario


def run(overhead: float, **fields):
    return simulate(scenario(engine={"name": "vllm", "request_overhead_s": overhead}, **fields)).requests


def test_a_sparse_open_loop_moves_ttft_and_e2e_by_the_overhead_and_nothing_else():
    sparse = {"workload__arrival": {"process": "poisson", "rate": 0.5}, "workload__num_requests": 30}
    a, b = run(0.0, **sparse), run(0.04, **sparse)
    np.testing.assert_allclose(b["arrival"], a["arrival"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(b["ttft"] - a["ttft"], 0.04, atol=1e-9)
    np.testing.assert_allclose(b["e2e"] - a["e2e"], 0.04, atol=1e-9)
    np.testing.assert_allclose(b["tpot"], a["tpot"], atol=1e-12)


def test_a_closed_loops_users_send_after_their_answer_and_think_and_wait_out_the_overhead():
    closed = {"workload__arrival": {"process": "closed", "concurrency": 3, "think_time_s": 0.1},
              "workload__num_requests": 30}
    r = run(0.05, **closed)
    assert (r["arrival"].iloc[:3] == 0.0).all()  # every user sends its first at once
    assert (r["ttft"] > 0.05).all() and (r["queueing_delay"] >= 0.05 - 1e-12).all()
    done = np.sort((r["arrival"] + r["e2e"]).to_numpy())  # when a user has its answer
    sends = np.sort(r["arrival"].to_numpy()[3:])
    np.testing.assert_allclose(sends, done[:len(sends)] + 0.1, atol=1e-9)  # then it thinks and sends


def test_the_overhead_slows_a_closed_loop_the_way_a_longer_think_would():
    closed = {"workload__arrival": {"process": "closed", "concurrency": 4}, "workload__num_requests": 40}
    fast, slow = run(0.0, **closed), run(0.2, **closed)
    assert slow["completion"].max() > fast["completion"].max() + 9 * 0.2  # ten rounds per user, each 0.2 s longer
