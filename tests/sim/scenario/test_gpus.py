"""The GPU catalog of 2026, user-defined GPUs, link domains (NVL72 racks, scale-out beyond a
node) and names that say which card they mean (issues 28, 32, 33)."""

from __future__ import annotations

import json
import textwrap

import pytest

from sim.cli.app import main
from sim.core.plan import StepShape
from sim.errors import ScenarioError
from sim.pricing import RooflineCost
from sim.pricing.roofline import BANDWIDTH, FLOPS, LINK, roofline_for
from sim.results.describe import setup_rows
from sim.results.money import cost_per_hour, gpu_inventory, own_prices
from sim.scenario.engines import EngineCost
from sim.scenario.specs import GPU_CATALOG, efficiency, get_gpu, get_model
from sim.scenario.specs.gpus import LINKS
from tests.sim.helpers import scenario

M8, M70, MIXTRAL = get_model("llama-3-8b"), get_model("llama-3-70b"), get_model("mixtral-8x7b")
NONE = EngineCost()


def prefill(n):
    return StepShape(n, 1, n, n * n, 0, 0, 1)


def decode(batch, ctx):
    return StepShape(batch, batch, 0, 0, batch, batch * ctx, batch)


# -- the catalog ---------------------------------------------------------------------------------
def test_catalog_holds_the_gpus_of_2026_each_with_its_source_date_power_and_price():
    for name in ("B200", "B300", "GB200-NVL72", "GB300-NVL72", "MI300X", "MI325X", "MI355X", "H20", "L4",
                 "L40S", "A10G", "H100-SXM", "H100-PCIe", "H100-NVL", "H200", "GH200", "RTX-PRO-6000",
                 "A100-40GB", "A100-80GB"):
        g = GPU_CATALOG[name]
        assert g.source and g.source_date[:2] == "20", name
        assert g.price_per_hour > 0 and g.price_source and g.price_date[:2] == "20", name
        assert g.power_w > 0 and g.link_domain >= 1 and g.scale_out in LINKS, name
        assert g.hbm_bandwidth > 0 and g.bf16_flops > 0 and g.memory_bytes > 16 * 2**30, name


def test_fp4_runs_on_fp4_tensor_cores_where_the_gpu_has_them_else_weight_only():
    b200, h100, mi355 = get_gpu("B200"), get_gpu("H100-SXM"), get_gpu("MI355X")
    assert b200.peak_flops("fp4") == b200.fp4_flops == 2 * b200.peak_flops("fp8")
    assert mi355.peak_flops("fp4") == mi355.fp4_flops > mi355.peak_flops("fp8")
    assert h100.fp4_flops == 0 and h100.peak_flops("fp4") == h100.peak_flops("bf16")
    # Blackwell Ultra cut INT8: int8 weights run weight-only there, never slower than bf16
    assert get_gpu("B300").peak_flops("int8") == get_gpu("B300").peak_flops("bf16")


def test_rack_scale_gpus_share_one_nvlink_domain_of_72():
    assert get_gpu("GB200").link_domain == get_gpu("GB300").link_domain == 72
    assert get_gpu("B200").link_domain == get_gpu("MI300X").link_domain == 8
    assert get_gpu("H100-NVL").link_domain == 2  # bridged pairs


# -- collective latencies: fitted or derived, never a bare default --------------------------------
def test_fitted_links_keep_their_fit_and_the_others_derive_from_nvlink4():
    fitted = efficiency.calibrated()["links"]
    for gpu, link in (("H100-SXM", "nvlink4"), ("A100-80GB", "nvlink3"), ("B200", "nvlink5")):
        assert get_gpu(gpu).interconnect == link and link in fitted  # each has published TP > 1 cases
        base, per_peer = fitted[link]
        assert efficiency.collective_latency(get_gpu(gpu), 8) == pytest.approx(base + 7 * per_peer)
        assert efficiency.link_constants(LINKS[link])[2] == "fitted"
    assert efficiency.collective_latency(get_gpu("B200"), 8) > 10e-6  # not the 4 µs the catalog once priced
    base, per_peer = fitted["nvlink4"]
    for link in ("xgmi", "xgmi4", "pcie4", "pcie5"):  # no published case: derived, hop latency apart
        assert link not in fitted
        assert efficiency.link_constants(LINKS[link]) == pytest.approx(
            (base + LINKS[link].latency_s - LINKS["nvlink4"].latency_s, per_peer, "derived from nvlink4"))
    pcie = efficiency.collective_latency(get_gpu("L40S"), 8)
    assert pcie > efficiency.collective_latency(get_gpu("H100-SXM"), 8)  # PCIe switches add latency


# -- TP beyond the link domain -------------------------------------------------------------------
def test_an_nvl72_all_reduce_grows_by_a_step_per_doubling_beyond_the_fitted_8():
    gb200 = get_gpu("GB200")
    per_peer = efficiency.link_constants(gb200.link)[1]
    at8, at64 = (efficiency.collective_latency(gb200, n) for n in (8, 64))
    assert at64 - at8 == pytest.approx(3 * per_peer)  # 8 → 64: three doublings
    assert at64 < 2 * at8


def test_tp_beyond_a_node_is_priced_over_the_scale_out_link():
    h100 = get_gpu("H100-SXM")
    assert efficiency.collective_bandwidth(h100, 8) == h100.interconnect_bandwidth
    assert efficiency.collective_bandwidth(h100, 16) == LINKS["ib400"].bandwidth
    assert efficiency.collective_latency(h100, 16) == pytest.approx(
        efficiency.collective_latency(h100, 8) + 2 * LINKS["ib400"].latency_s)
    tp8 = RooflineCost(M70, h100, tp=8, engine=NONE).op_times(prefill(8192))["allreduce"]
    tp16 = RooflineCost(M70, h100, tp=16, engine=NONE).op_times(prefill(8192))["allreduce"]
    assert tp16 > 5 * tp8  # 50 GB/s NICs against 450 GB/s NVLink


def test_an_nvl72_rack_keeps_tp_64_on_nvlink_and_tp_144_goes_over_its_nics():
    gb200 = get_gpu("GB200")
    assert efficiency.collective_bandwidth(gb200, 64) == gb200.interconnect_bandwidth
    assert efficiency.collective_bandwidth(gb200, 144) == LINKS["ib400"].bandwidth
    s = scenario(model="llama-3-70b", hardware={"gpu": "GB200-NVL72", "tp": 64})
    assert roofline_for(s).params[LINK] == pytest.approx(gb200.interconnect_bandwidth * 0.8)


def test_expert_parallel_all_to_all_beyond_the_domain_goes_over_the_next_link():
    pairs = scenario(model="mixtral-8x7b", hardware={"gpu": {"base": "H100-SXM", "link": {"domain": 2}},
                                                     "tp": 4, "expert_parallel": True})
    node = scenario(model="mixtral-8x7b", hardware={"gpu": "H100-SXM", "tp": 4, "expert_parallel": True})
    a2a = [roofline_for(s).op_times(prefill(4096))["all_to_all"] for s in (pairs, node)]
    assert a2a[0] > 5 * a2a[1]


@pytest.mark.parametrize("hardware,fragment", [
    ({"gpu": "H100-SXM", "tp": 12}, "would split one of H100-SXM's 8-GPU nvlink4 domains"),
    ({"gpu": {"base": "GH200", "link": {"scale_out": "none"}}, "tp": 2}, "no scale-out link"),
    ({"gpu": {"name": "rack4", "memory_gib": 80, "hbm_tb_s": 3, "peaks": {"bf16": 900},
              "link": {"type": "nvlink4", "domain": 4, "scale_out": "none"}},
      "price_per_gpu_hour": 2.0, "tp": 8}, "exceeds rack4's link domain of 4 GPUs"),
])
def test_tp_that_no_link_can_carry_is_refused_with_why(hardware, fragment):
    with pytest.raises(ScenarioError) as e:
        scenario(model="llama-3-70b", hardware=hardware)
    assert e.value.field == "hardware.tp" and fragment in e.value.message


# -- user-defined GPUs ---------------------------------------------------------------------------
H100_TWIN = {"name": "twin", "memory_gib": 81559 / 1024, "hbm_tb_s": 3.35, "arch": "hopper",
             "peaks": {"bf16": 989, "fp8": 1979, "int8": 1979}, "link": {"type": "nvlink4", "bandwidth_gb_s": 450},
             "power_w": 700, "idle_w": 80, "hbm_w": 315, "tensor_w": 827}  # the power model's figures too


def test_a_gpu_defined_inline_with_h100_figures_prices_steps_as_the_h100():
    twin = scenario(hardware={"gpu": H100_TWIN, "price_per_gpu_hour": 2.0})
    h100 = scenario(hardware={"gpu": "H100-SXM"})
    assert twin.gpu_spec.name == "twin"
    assert (roofline_for(twin).params == roofline_for(h100).params).all()
    assert twin.memory.num_blocks == h100.memory.num_blocks


def test_overriding_a_catalog_field_changes_only_that_field():
    s = scenario(hardware={"gpu": {"base": "H100-SXM", "memory_gib": 94, "hbm_tb_s": 3.9}})
    g, h100 = s.gpu_spec, get_gpu("H100-SXM")
    assert g.memory_bytes == 94 * 2**30 and g.hbm_bandwidth == 3.9e12
    assert (g.bf16_flops, g.interconnect, g.price_per_hour) == (h100.bf16_flops, h100.interconnect, h100.price_per_hour)
    p = roofline_for(s).params
    assert p[BANDWIDTH] == pytest.approx(3.9e12 * efficiency.hbm_fraction(h100))
    assert p[FLOPS] == roofline_for(scenario()).params[FLOPS]


def test_set_changes_one_field_of_the_scenarios_catalog_gpu():
    from sim.scenario.load import load_scenario

    s = load_scenario(None, ["hardware.gpu=H200", "hardware.gpu.hbm_tb_s=6", "hardware.gpu.link.domain=4"])
    assert s.gpu_spec.hbm_bandwidth == 6e12 and s.gpu_spec.link_domain == 4
    assert s.gpu_spec.memory_bytes == get_gpu("H200").memory_bytes


def test_price_per_gpu_hour_replaces_the_catalog_price_in_a_study_cost():
    s = scenario(replicas=2, hardware={"gpu": "H100-SXM", "tp": 2, "price_per_gpu_hour": 1.5})
    assert cost_per_hour(gpu_inventory(s), {"H100-SXM": 9.0}, own_prices(s)) == pytest.approx(4 * 1.5)
    plain = scenario(replicas=2, hardware={"gpu": "H100-SXM", "tp": 2})
    assert cost_per_hour(gpu_inventory(plain), {}, own_prices(plain)) == pytest.approx(4 * 2.49)


SCENARIO = """
name: own-gpu
model: llama-3-8b
hardware:
  gpu: {gpu}
  price_per_gpu_hour: 2.0
workload:
  num_requests: 120
  arrival: {{process: poisson, rate: 8}}
  prompt_len: {{dist: uniform, min: 64, max: 512}}
  output_len: {{dist: uniform, min: 16, max: 128}}
"""


def _run(tmp_path, name: str, gpu: dict) -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(SCENARIO.format(gpu=json.dumps(gpu))))
    assert main(["run", str(path), "--out", str(tmp_path / name)]) == 0
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_servesim_run_with_an_inline_gpu_reports_with_its_figures(tmp_path, capsys):
    twin = _run(tmp_path, "twin", H100_TWIN)
    fast = _run(tmp_path, "fast", {**H100_TWIN, "name": "fast", "hbm_tb_s": 6.7})
    h100 = _run(tmp_path, "h100", {"base": "H100-SXM"})
    out = capsys.readouterr().out
    assert "defined in the scenario" in out and "6.7 TB/s HBM" in out
    assert twin["summary"] == h100["summary"]  # the same figures price the same steps
    assert fast["summary"]["tpot_mean"] < 0.8 * twin["summary"]["tpot_mean"]  # decode streams at 2× HBM
    assert fast["config"]["hardware"]["gpu"]["hbm_tb_s"] == 6.7
    assert "fast" in (tmp_path / "fast" / "report.html").read_text()


@pytest.mark.parametrize("gpu,extra,field,fragment", [
    ({"base": "K80"}, {}, "hardware.gpu.base", "unknown GPU 'K80'"),
    ({"name": "x", "memory_gib": 80}, {"price_per_gpu_hour": 1}, "hardware.gpu",
     "needs hbm_tb_s, link, peaks.bf16"),
    ({"base": "H100-SXM", "peaks": {"bf16": -5}}, {}, "hardware.gpu.peaks.bf16", "greater than 0"),
    ({"base": "H100-SXM", "link": {"type": "nvlink9"}}, {}, "hardware.gpu.link.type", "'nvlink4'"),
    ({"base": "H100-SXM", "hbm": 3}, {}, "hardware.gpu.hbm", "unknown field"),
    ({"base": "H100-SXM", "arch": "hoper"}, {}, "hardware.gpu.arch", "expected one of"),
    ({**H100_TWIN}, {}, "hardware", "price_per_gpu_hour"),
])
def test_bad_gpu_fields_are_named_and_exit_2(tmp_path, capsys, gpu, extra, field, fragment):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"model": "llama-3-8b", "hardware": {"gpu": gpu, **extra}}))
    code = main(["run", str(path), "--out", str(tmp_path / "o")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2 and "Traceback" not in text
    assert f"{field}:" in text and fragment in text, text
    assert not (tmp_path / "o").exists()


# -- names that say which card ------------------------------------------------------------------
def test_an_ambiguous_name_runs_and_says_which_card_it_was_read_as():
    s = scenario(hardware={"gpu": "H100"})
    assert s.hardware.gpu == "H100-SXM"
    rows = dict(setup_rows(s, {}))
    assert "H100 read as H100-SXM" in rows["GPU"] and "H100-PCIe or H100-NVL" in rows["GPU"]
    assert "GPU" not in dict(setup_rows(scenario(hardware={"gpu": "H100-SXM"}), {}))
    assert get_gpu("H100-PCIe").bf16_flops < get_gpu("H100-NVL").bf16_flops < get_gpu("H100").bf16_flops


def test_list_gpus_shows_fp4_link_domain_power_and_sources(capsys):
    assert main(["list", "gpus", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    gb300 = rows["GB300-NVL72"]
    assert gb300["fp4_tflops"] == 15000 and gb300["link_domain"] == 72 and gb300["power_w"] == 1400
    assert gb300["source"] and gb300["source_date"] and gb300["price_date"]
    base, per_peer = efficiency.calibrated()["links"]["nvlink4"]
    assert rows["H100-SXM"]["allreduce_latency"] == "fitted"
    assert rows["H100-SXM"]["allreduce_domain_us"] == round((base + 7 * per_peer) * 1e6, 1)
    assert gb300["allreduce_latency"] == "fitted" and rows["MI355X"]["allreduce_latency"] == "derived from nvlink4"
    assert main(["list", "gpus"]) == 0
    out = capsys.readouterr().out
    assert "domain" in out and "fp4" in out and "MI355X" in out
