"""Several request classes in one scenario: own traffic, SLOs and priority; metrics per class."""

from __future__ import annotations

from sim.loops.run import simulate
from tests.sim.helpers import scenario

LEN = {"dist": "uniform", "min": 200, "max": 1500}
OUT = {"dist": "uniform", "min": 50, "max": 300}


def classes(chat_priority=0, batch_priority=0):
    return [
        {"name": "chat", "num_requests": 400, "arrival": {"process": "poisson", "rate": 12},
         "prompt_len": LEN, "output_len": OUT, "slo": {"ttft_s": 0.3}, "priority": chat_priority},
        {"name": "batch", "num_requests": 400, "arrival": {"process": "poisson", "rate": 12},
         "prompt_len": LEN, "output_len": OUT, "slo": {"e2e_s": 1000.0}, "priority": batch_priority},
    ]


def run(**kw):
    return simulate(scenario(workload={"classes": classes(**kw)}, hardware={"memory_utilization": 0.3},
                             scheduler__max_num_seqs=32))


def test_metrics_per_class_with_each_class_slo():
    r = run()
    assert set(r.requests["class"]) == {"chat", "batch"}
    per = r.summary["classes"]
    assert per["chat"]["requests"] == per["batch"]["requests"] == 400
    # batch's only SLO is a generous E2E limit: all of it meets it; chat has a tight TTFT
    assert per["batch"]["slo_attainment"] == 1.0
    assert per["chat"]["slo_attainment"] < 1.0
    assert r.summary["slo_attainment"] == (per["chat"]["slo_attainment"] + per["batch"]["slo_attainment"]) / 2


def test_priority_serves_the_favoured_class_first():
    fair = run().summary["classes"]
    favoured = run(chat_priority=0, batch_priority=1).summary["classes"]
    assert favoured["chat"]["ttft_p90"] < 0.5 * fair["chat"]["ttft_p90"]
    assert favoured["batch"]["ttft_p90"] > fair["batch"]["ttft_p90"]
