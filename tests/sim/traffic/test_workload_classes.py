"""Multi-class traffic: classes merge sorted by arrival, each at its own rate, with draws that
do not depend on the other classes."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ScenarioError
from sim.traffic import build_workload
from tests.sim.helpers import scenario

CHAT = {"name": "chat", "num_requests": 3000, "arrival": {"process": "poisson", "rate": 10},
        "prompt_len": {"dist": "uniform", "min": 10, "max": 500},
        "output_len": {"dist": "fixed", "value": 50},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05}, "priority": 0}
BATCH = {"name": "batch", "num_requests": 1000, "arrival": {"process": "gamma", "rate": 2, "cv": 2},
         "prompt_len": {"dist": "fixed", "value": 2000},
         "output_len": {"dist": "uniform", "min": 100, "max": 900},
         "slo": {"e2e_s": 60}, "priority": 5}


def classes_workload(*classes, seed=0, **fields):
    return build_workload(scenario(seed=seed, workload={"classes": list(classes), **fields}))


def of_class(w, k):
    sel = w.class_id == k
    return w.arrival[sel], w.prompt_len[sel], w.output_len[sel]


def test_classes_merge_sorted_with_their_own_rates_slos_and_priorities():
    w = classes_workload(CHAT, BATCH)
    assert len(w) == 4000 and w.class_names == ("chat", "batch")
    assert (np.diff(w.arrival) >= 0).all()
    assert w.class_id.dtype == np.int16 and w.priority.dtype == np.int16
    for k, rate, n in [(0, 10, 3000), (1, 2, 1000)]:
        t, _, _ = of_class(w, k)
        assert len(t) == n
        assert (n - 1) / (t[-1] - t[0]) == pytest.approx(rate, rel=0.1)
    chat = w.class_id == 0
    assert (w.priority[chat] == 0).all() and (w.priority[~chat] == 5).all()
    np.testing.assert_array_equal(w.slo_ttft[chat], 0.5)
    assert np.isnan(w.slo_ttft[~chat]).all() and np.isnan(w.slo_e2e[chat]).all()
    np.testing.assert_array_equal(w.slo_e2e[~chat], 60.0)
    assert (w.prompt_len[~chat] == 2000).all() and (w.output_len[chat] == 50).all()


def test_ties_keep_class_order():
    a = {"name": "a", "num_requests": 5, "arrival": {"process": "constant", "rate": 1}}
    b = {**a, "name": "b"}
    w = classes_workload(a, b)
    np.testing.assert_array_equal(w.class_id, [0, 1] * 5)


def test_a_class_draws_do_not_depend_on_other_classes():
    base = classes_workload(CHAT, BATCH, seed=7)
    other = {**BATCH, "arrival": {"process": "poisson", "rate": 50}, "num_requests": 200}
    changed = classes_workload(CHAT, other, seed=7)
    added = classes_workload(CHAT, BATCH, {**CHAT, "name": "extra"}, seed=7)
    for w in (changed, added):
        for a, b in zip(of_class(base, 0), of_class(w, 0), strict=True):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(of_class(base, 1), of_class(added, 1), strict=True):
        np.testing.assert_array_equal(a, b)
    # the same spec in another slot draws differently: streams come from the class index
    assert not np.array_equal(of_class(added, 0)[1], of_class(added, 2)[1])


def test_deterministic_for_a_seed():
    a, b = classes_workload(CHAT, BATCH, seed=3), classes_workload(CHAT, BATCH, seed=3)
    for f in ("arrival", "prompt_len", "output_len", "class_id"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    c = classes_workload(CHAT, BATCH, seed=4)
    assert not np.array_equal(a.arrival, c.arrival)


def test_workload_bounds_cut_the_merged_traffic_and_bound_open_classes():
    open_chat = {k: v for k, v in CHAT.items() if k != "num_requests"}
    w = classes_workload(open_chat, BATCH, duration_s=100.0)
    assert w.arrival.max() < 100.0
    assert (w.class_id == 0).sum() == pytest.approx(1000, rel=0.15)  # 10/s for 100 s
    w = classes_workload(CHAT, BATCH, num_requests=500)
    assert len(w) == 500
    full = classes_workload(CHAT, BATCH)
    np.testing.assert_array_equal(w.arrival, full.arrival[:500])


def test_single_class_workload_leaves_class_fields_unset():
    w = build_workload(scenario())
    assert w.class_id is None and w.priority is None and w.slo_ttft is None
    assert w.class_names == ("default",)
    assert w.prefix_offsets is None and w.session_id is None


def test_a_class_may_replay_a_trace(tmp_path):
    (tmp_path / "g.csv").write_text("t,in,out\n0,10,3\n0.5,20,4\n2,30,5\n")
    traced = {"name": "replay", "trace": {
        "path": str(tmp_path / "g.csv"), "format": "csv",
        "columns": {"arrival": "t", "prompt_len": "in", "output_len": "out"}}}
    w = classes_workload({**CHAT, "num_requests": 10}, traced)
    np.testing.assert_array_equal(w.prompt_len[w.class_id == 1], [10, 20, 30])


@pytest.mark.parametrize("workload,fragments", [
    ({"classes": [CHAT], "arrival": {"process": "poisson", "rate": 1}},
     ["either 'classes' or ['arrival']", "inside each class"]),
    ({"classes": [CHAT], "shared_prefix": {"num_prompts": 2, "length": 64}},
     ["either 'classes' or ['shared_prefix']"]),
    ({"classes": []}, ["at least one class"]),
    ({"classes": [CHAT, CHAT]}, ["unique", "chat"]),
    ({"classes": [{"name": "open"}]}, ["classes[0] (open)", "num_requests or duration_s"]),
    ({"classes": [{**CHAT, "priority": 40000}]}, ["workload.classes[0].priority"]),
    ({"classes": [{**CHAT, "slo": {"ttft": 1}}]}, ["workload.classes[0].slo.ttft", "unknown"]),
])
def test_bad_classes_are_reported(workload, fragments):
    with pytest.raises(ScenarioError) as e:
        scenario(workload=workload)
    for f in fragments:
        assert f in str(e.value), str(e.value)
