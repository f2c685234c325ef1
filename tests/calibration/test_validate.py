"""``servesim validate``: the engine and the simulator on one scenario, joined per request.

The validations here run a stand-in engine whose step times are given, on virtual time
(``fake_engine``), with its profile: what they report is known whatever the machine's load.
How close the simulation comes to the real engine is measured by ``benchmarks/quick_checks.py``
and ``benchmarks/validation_bench.py``."""

from __future__ import annotations

import json

import pytest

from sim.cli.app import main
from tests.calibration.conftest import write_scenario

pytest.importorskip("torch")

BOUND = 1e-6  # the stand-in's profile prices its steps exactly


def test_validate_reports_errors_within_the_bound(given_profile, fake_engine_runs, scenario, tmp_path, capsys):
    out = tmp_path / "v"
    code = main(["validate", str(scenario), "--profile", str(given_profile), "--out", str(out),
                 "--idle", "spin", "--max-error", f"e2e={BOUND}", "--max-error", f"ttft={BOUND}",
                 "--max-error", f"tpot.max={BOUND}"])
    text = " ".join(capsys.readouterr().out.split())
    v = json.loads((out / "validation.json").read_text())
    assert code == 0, (text, v["errors"], v["steps"], v["machine"])
    assert v["requests"] == {"real": 12, "sim": 12, "joined": 12}
    for m in ("ttft", "tpot", "e2e"):
        e = v["errors"][m]
        assert e["n"] > 0 and 0 <= e["median"] <= e["p90"] <= e["max"]
    for k in ("ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99", "tpot_p50", "request_throughput",
              "goodput", "output_token_throughput"):
        d = v["summary"][k]
        assert d["diff"] == pytest.approx(d["sim"] - d["real"])
    assert v["steps"]["n"] > 0 and v["steps"]["median_abs"] < BOUND
    assert v["machine"]["speed_ratio"] == pytest.approx(1.0)  # the probe took what it took at calibration
    assert v["profile"]["model"] == "tiny-llama-12m"
    assert "TTFT" in text and "E2E" in text and "summary metrics" in text
    page = (out / "report.html").read_text()
    assert "Sim vs real, per request" in page and "Latency CDFs" in page and "plotly" in page
    assert (out / "requests.csv").read_text().startswith("request_id,")
    assert "run" in (out / "steps.csv").read_text().splitlines()[0]


def test_chunked_prefill_validates_with_the_per_op_model(given_profile, fake_engine_runs, tmp_path):
    s = write_scenario(tmp_path / "c.yaml", policy="chunked-prefill", requests=8, rate=8.0)
    assert main(["validate", str(s), "--profile", str(given_profile), "--out", str(tmp_path / "v"),
                 "--cost-mode", "ops"]) == 0
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["requests"]["joined"] == 8
    # the per-op model sums tables and fits interpolated over the grid: within 1% here (0.9% on
    # TTFT, 0.2% on E2E; the whole-step fit is exact, the test above)
    assert v["errors"]["e2e"]["median"] < 0.01 and v["errors"]["ttft"]["median"] < 0.02


def test_a_broken_profile_exceeds_the_bound(given_profile, fake_engine_runs, scenario, tmp_path, capsys):
    """A profile three times too slow: validate must notice and exit 1."""
    data = json.loads(given_profile.read_text())

    def scale(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("seconds", "coef"):
                    node[k] = [3 * x for x in v]
                elif k == "overhead_s":
                    node[k] = 3 * v
                else:
                    scale(v)

    scale(data["ops"])
    scale(data["step"])
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    code = main(["validate", str(scenario), "--profile", str(broken), "--out", str(tmp_path / "v"),
                 "--set", "workload.num_requests=6", "--max-error", "0.3"])
    assert code == 1
    assert "FAIL" in capsys.readouterr().out
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert v["errors"]["e2e"]["median"] > 1.0 and v["errors"]["e2e"]["bias"] > 0


def test_a_second_engine_run_starts_from_an_empty_engine(quick_profile, tmp_path):
    """``repeats=2`` runs the scenario twice on one executor: the first run's last finished
    requests (freed only by a plan that never comes) must not be there for the second."""
    from calibration.validate import validate
    from engine.execute import EngineSetup
    from sim.scenario.load import load_scenario

    s = write_scenario(tmp_path / "r.yaml", requests=6, rate=8.0)
    v = validate(load_scenario(s), quick_profile, EngineSetup(device="cpu", threads=1), "r", repeats=2)
    j = v.to_json()
    assert j["requests"]["joined"] == 6
    assert j["run_to_run_spread"]["e2e"]["n"] == 6


def test_validate_records_its_errors_in_the_profile_and_runs_priced_by_it_show_them(
        given_profile, fake_engine_runs, scenario, tmp_path, capsys):
    from sim.pricing.profile import load_profile
    from sim.pricing.trust import error_band
    from sim.scenario.load import load_scenario

    profile = tmp_path / "p.json"  # (other tests validate the shared profile too: its record goes)
    profile.write_text(json.dumps({**json.loads(given_profile.read_text()), "validation": None}))
    assert main(["validate", str(scenario), "--profile", str(profile), "--out", str(tmp_path / "v")]) == 0
    assert "recorded in" in capsys.readouterr().out
    v = json.loads((tmp_path / "v" / "validation.json").read_text())
    rec = load_profile(profile).validation
    assert rec.requests == v["requests"]["joined"] == 12 and rec.against == "servesim's engine on cpu"
    assert rec.scenario == "tiny-continuous"
    assert rec.errors["tpot"] == pytest.approx(v["errors"]["tpot"]["median"])
    assert rec.errors["throughput"] == pytest.approx(abs(v["summary"]["output_token_throughput"]["rel_diff"]))
    s = load_scenario(str(write_scenario(tmp_path / "s.yaml", cost={"model": "profile", "profile": str(profile)})))
    band = error_band(s).bands["ttft"]
    assert band.error == pytest.approx(v["errors"]["ttft"]["median"]) and band.cases == 12
    assert "median per-request error over 12 requests, validated against servesim's engine on cpu" in band.text
