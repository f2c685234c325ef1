"""Energy from the step log (sim/results/energy.py): per step, fleet, request and token, and its cost."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.loops.run import simulate
from sim.pricing.power import IDLE, power_row
from sim.pricing.roofline import RooflineCost
from sim.results.energy import (
    USD_PER_KWH,
    FleetPower,
    fleet_energy,
    fleet_power,
    power_series,
    run_energy,
    scenario_power,
)
from sim.scenario.specs import get_gpu, get_model
from tests.sim.helpers import scenario

GPU = get_gpu("H100-SXM")


def fleet(tp: int = 2, price: float | None = None) -> FleetPower:
    return fleet_power([RooflineCost(get_model("llama-3-8b"), GPU, tp=tp)], [price])


def steps_frame(rows: list[dict]) -> pd.DataFrame:
    base = {"replica": 0, "engine": 0, "start": 0.0, "duration": 0.0, "num_seqs": 0, "num_tokens": 0,
            "prefill_tokens": 0, "decode_seqs": 0, "kv_blocks_used": 0, "kv_blocks_cached": 0, "queue_len": 0}
    return pd.DataFrame([{**base, **r} for r in rows], columns=list(base))


def requests_frame(prompts, cached, outputs) -> pd.DataFrame:
    n = len(prompts)
    return pd.DataFrame({"prompt_tokens": prompts, "cached_tokens": cached, "output_tokens": outputs,
                         "status": ["finished"] * n})


def test_an_idle_fleet_draws_idle_power_on_every_gpu_over_the_window():
    f = fleet(tp=2)
    idle = power_row(GPU)[IDLE]
    summary = {"requests": 2, "arrival_span_s": 100.0, "duration_s": 100.0, "output_tokens": 0, "prompt_tokens": 0}
    out = run_energy(f, steps_frame([]), requests_frame([], [], []), summary, np.array([16.0]))
    assert out["energy_kwh"] == pytest.approx(2 * idle * 100.0 / 3.6e6)
    assert out["mean_power_w"] == pytest.approx(2 * idle)
    assert out["energy_cost_usd"] == pytest.approx(out["energy_kwh"] * USD_PER_KWH)
    edges = np.array([0.0, 1.0, 2.0])
    assert np.allclose(power_series(f, steps_frame([]), edges), 2 * idle)


def test_idle_power_is_counted_over_the_seconds_each_engine_was_held():
    f = fleet(tp=2)
    idle = power_row(GPU)[IDLE]
    summary = {"requests": 2, "arrival_span_s": 100.0, "duration_s": 100.0, "output_tokens": 0, "prompt_tokens": 0}
    out = run_energy(f, steps_frame([]), requests_frame([], [], []), summary, np.array([16.0]), np.array([40.0]))
    assert out["energy_kwh"] == pytest.approx(2 * idle * 40.0 / 3.6e6)  # an autoscaled replica held 40 s of 100
    assert out["mean_power_w"] == pytest.approx(2 * idle * 0.4)


def test_energy_arithmetic_per_step_fleet_token_and_request():
    f = fleet(tp=2, price=0.2)
    idle = power_row(GPU)[IDLE]
    steps = steps_frame([  # a prefill of 2 prompts, then 3 decodes of both
        {"start": 0.0, "duration": 0.05, "num_seqs": 2, "num_tokens": 1000, "prefill_tokens": 1000,
         "kv_blocks_used": 64},
        *({"start": 0.05 + 0.02 * i, "duration": 0.02, "num_seqs": 2, "num_tokens": 2, "decode_seqs": 2,
           "kv_blocks_used": 64} for i in range(3))])
    requests = requests_frame([600, 400], [0, 0], [4, 4])
    summary = {"requests": 2, "arrival_span_s": 10.0, "duration_s": 10.0, "output_tokens": 8, "prompt_tokens": 1000}
    out = run_energy(f, steps, requests, summary, np.array([16.0]))
    w = steps["power_w"].to_numpy()
    dynamic = (w - idle) * steps["duration"].to_numpy() * 2
    total = fleet_energy(float(dynamic.sum()), [(2 * 10.0, idle)])
    assert out["energy_kwh"] == pytest.approx(total / 3.6e6)
    assert out["energy_j_per_output_token"] == pytest.approx(total / 8)
    assert out["energy_kwh_per_1m_tokens"] == pytest.approx(total / 3.6e6 / 1008 * 1e6)
    assert out["energy_cost_usd"] == pytest.approx(total / 3.6e6 * 0.2)
    assert w[0] > w[1] > idle  # the prefill draws more than the decodes
    # every computed token's share: the requests add up to the fleet's energy
    assert requests["energy_j"].sum() == pytest.approx(total)
    assert requests["energy_j"][0] > requests["energy_j"][1]  # the longer prompt


def test_cached_prompt_tokens_cost_a_request_nothing():
    f = fleet()
    steps = steps_frame([{"start": 0.0, "duration": 0.05, "num_seqs": 2, "num_tokens": 800, "prefill_tokens": 800}])
    summary = {"requests": 2, "arrival_span_s": 1.0, "duration_s": 1.0, "output_tokens": 2, "prompt_tokens": 1200}
    requests = requests_frame([600, 600], [0, 400], [1, 1])
    run_energy(f, steps, requests, summary, np.array([16.0]))
    assert requests["energy_j"][0] == pytest.approx(3 * requests["energy_j"][1])


def test_power_series_spreads_a_step_over_the_bins_it_covers():
    f = fleet(tp=1)
    idle = power_row(GPU)[IDLE]
    steps = steps_frame([{"start": 0.25, "duration": 0.5, "num_seqs": 1, "num_tokens": 2000,
                          "prefill_tokens": 2000}])
    steps["power_w"] = [idle + 400.0]
    got = power_series(f, steps, np.array([0.0, 0.5, 1.0, 1.5]))
    assert got == pytest.approx([idle + 200.0, idle + 200.0, idle])


def test_a_run_reports_energy_and_its_price_can_be_set():
    default = simulate(scenario())
    dear = simulate(scenario(hardware={"gpu": "H100-SXM", "energy_usd_per_kwh": 2 * USD_PER_KWH}))
    s = default.summary
    assert s["energy_kwh"] > 0 and s["energy_j_per_output_token"] > 0
    assert dear.summary["energy_kwh"] == s["energy_kwh"]
    assert dear.summary["energy_cost_usd"] == pytest.approx(2 * s["energy_cost_usd"])
    idle = power_row(GPU)[IDLE]
    assert idle < s["mean_power_w"] < GPU.power_w
    assert (default.steps["power_w"] > idle).all() and (default.steps["power_w"] <= GPU.power_w).all()


def test_a_power_cap_bounds_every_step_and_the_fleet_draw():
    capped = simulate(scenario(hardware={"gpu": "H100-SXM", "power_cap_w": 300}, scheduler__policy="chunked-prefill"))
    assert capped.steps["power_w"].max() <= 300 * (1 + 1e-9)
    series = power_series(scenario_power(capped.scenario), capped.steps, np.linspace(0, 5, 11))
    assert series.max() <= 300 * (1 + 1e-9)


def test_the_report_draws_power_over_time_and_the_summary_shows_energy(tmp_path):
    from sim.results.report import write_report
    from sim.results.summary_view import summary_blocks

    result = simulate(scenario(hardware={"gpu": "H100-SXM", "power_cap_w": 400}))
    page = write_report(result, tmp_path / "report.html").read_text()
    assert "Power over time" in page and "power cap" in page
    _, blocks = summary_blocks(result)
    rows = {r[0]: r[1] for b in blocks for r in b.rows if len(r) == 2}
    assert "J per output token" in rows["energy"] and "kWh per 1M tokens" in rows["energy"]


def test_a_gpu_without_tdp_has_no_energy_figures():
    gpu = {"name": "mine", "memory_gib": 80, "hbm_tb_s": 3, "peaks": {"bf16": 900}, "link": "pcie5"}
    result = simulate(scenario(hardware={"gpu": gpu, "price_per_gpu_hour": 1.0}))
    assert result.summary["energy_kwh"] != result.summary["energy_kwh"]  # NaN: not modelled
    assert result.requests["energy_j"].isna().all()


def test_step_power_in_chunks_gives_the_bits_of_all_steps_at_once(monkeypatch):
    from sim.results import energy
    from sim.results.energy import step_power

    run = simulate(scenario())
    f, sizes = scenario_power(run.scenario), np.array([16.0])
    whole_w, whole_j = step_power(f, run.steps, sizes)
    edges = np.linspace(0.0, float(run.steps["start"].max()) + 1.0, 7)
    whole_series = power_series(f, run.steps.assign(power_w=whole_w), edges)
    monkeypatch.setattr(energy, "POWER_CHUNK", 7)  # many chunks, the last one short
    w, j = step_power(f, run.steps, sizes)
    assert len(run.steps) > 3 * 7
    assert np.array_equal(w, whole_w) and np.array_equal(j, whole_j)
    # the series adds its chunks' joules: the same sums in another order
    assert np.allclose(power_series(f, run.steps.assign(power_w=w), edges), whole_series, rtol=1e-12)


def test_the_token_split_and_engine_joules_in_chunks_add_up_to_all_steps_at_once(monkeypatch):
    from sim.results import energy

    run = simulate(scenario(replicas=2))
    dynamic = energy.step_power(scenario_power(run.scenario), run.steps, np.array([16.0, 16.0]))[1]
    whole = energy.token_split(run.steps, dynamic), energy.engine_joules(run.steps, dynamic, 2)
    monkeypatch.setattr(energy, "POWER_CHUNK", 7)
    pre_j, dec_j, pre_n, dec_n = energy.token_split(run.steps, dynamic)
    assert (pre_n, dec_n) == whole[0][2:] and pre_n + dec_n == run.steps["num_tokens"].sum()  # counts: exact
    assert pre_j == pytest.approx(whole[0][0], rel=1e-12) and dec_j == pytest.approx(whole[0][1], rel=1e-12)
    assert pre_j + dec_j == pytest.approx(dynamic.sum(), rel=1e-12)
    assert np.allclose(energy.engine_joules(run.steps, dynamic, 2), whole[1], rtol=1e-12)
    assert (whole[1] > 0).all()
