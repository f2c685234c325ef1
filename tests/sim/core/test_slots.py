"""llama.cpp's fixed slots (``scheduler.policy: slots``, ``engine: llama.cpp``): ``max_num_seqs``
slots, each with its own context of ``slot_context`` tokens allocated at start; a request longer
than a slot is refused, nothing is ever preempted, and a step takes every decoding slot's token
first, then prompt tokens up to ``chunk_size`` (n_batch)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import InputError
from sim.loops.run import simulate
from sim.results.describe import scheduler_text
from tests.sim.helpers import scenario

SLOTS = {"engine": "llama.cpp", "scheduler__max_num_seqs": 3, "scheduler__slot_context": 1000,
         "scheduler__chunk_size": 256}
HEAVY = {"workload__arrival": {"process": "poisson", "rate": 40},
         "workload__prompt_len": {"dist": "uniform", "min": 50, "max": 1100},
         "workload__output_len": {"dist": "uniform", "min": 100, "max": 400}}


def test_a_slot_engine_holds_its_slots_contexts_and_refuses_longer_requests():
    s = scenario(**SLOTS, **HEAVY)
    assert s.memory.num_blocks == 3 * 63  # ceil(1000 / 16) blocks per slot
    res = simulate(s)
    req = res.requests
    rejected = req[req["status"] == "rejected"]
    assert len(rejected) > 0 and (req["status"] == "finished").sum() == len(req) - len(rejected)
    assert (rejected["prompt_tokens"] + rejected["max_output_tokens"] > 1000).all()
    assert res.summary["preemptions"] == 0  # a slot holds its whole context: nobody waits for memory
    steps = res.steps
    assert steps["num_seqs"].max() == 3  # the slots fill, and never hold more
    assert steps["kv_blocks_used"].max() <= 3 * 63
    assert (steps["num_tokens"] <= 256).all()  # n_batch


def test_which_requests_a_slot_refuses():
    from sim.traffic import build_workload

    s = scenario(**SLOTS, **HEAVY)
    w = build_workload(s)
    too_long = np.asarray(w.prompt_len) + np.asarray(w.output_len) > 1000
    res = simulate(s)
    rejected = (res.requests.sort_values("request_id")["status"] == "rejected").to_numpy()
    np.testing.assert_array_equal(rejected, too_long)


def test_slots_schedule_as_chunked_prefill_on_the_slots_memory():
    """Every slot's context as a pool of blocks, no watermark, seats = slots, length ≤ a slot:
    the same schedule, request by request, as chunked prefill given exactly that."""
    light = {"workload__prompt_len": {"dist": "uniform", "min": 50, "max": 700},
             "workload__output_len": {"dist": "uniform", "min": 50, "max": 300},
             "workload__arrival": {"process": "poisson", "rate": 30}}
    slots = simulate(scenario(**SLOTS, **light)).requests
    chunked = simulate(scenario(engine="llama.cpp", scheduler={
        "policy": "chunked-prefill", "max_num_seqs": 3, "chunk_size": 256, "watermark": 0.0},
        hardware__kv_blocks=3 * 63, **light)).requests
    cols = ["request_id", "status", "first_token", "completion"]
    np.testing.assert_array_equal(slots[cols].to_numpy(), chunked[cols].to_numpy())


def test_the_scheduler_says_what_it_is():
    s = scenario(**SLOTS)
    assert scheduler_text(s.scheduler) == "fixed slots, 3 slots of 1,000 tokens, 256-token batches"


@pytest.mark.parametrize("fields, where", [
    ({"scheduler__policy": "slots"}, "slot_context"),  # slots need their context
    ({"scheduler__slot_context": 512}, "slot_context"),  # only slots have one
    ({**SLOTS, "hardware__kv_blocks": 100}, "hardware.kv_blocks"),
    ({**SLOTS, "scheduler__prefix_caching": True}, "prefix_caching"),
    ({**SLOTS, "scheduler__preemption": "swap"}, "preemption"),
    ({**SLOTS, "scheduler__slot_context": 9000}, "scheduler.slot_context"),  # beyond Llama-3-8B's 8192
    ({**SLOTS, "scheduler__max_num_seqs": 64, "scheduler__slot_context": 8192, "hardware__gpu": "L4"},
     "scheduler.slot_context"),  # 64 × 8k tokens of KV do not fit beside the weights on 24 GB
])
def test_what_a_slot_engine_cannot_be_is_refused_by_name(fields, where):
    with pytest.raises(InputError, match=where.replace(".", r"\.")):
        scenario(**fields)
