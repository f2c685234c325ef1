"""``validate --endpoint``'s comparison of measured runs with the simulation, on the fake
server's virtual clock: the fake's scheduler and step cost are known, so a profile that says
them predicts its measured requests closely, and two runs of the same requests agree exactly."""

import numpy as np
import pytest

from endpoint.records import itl_frame, requests_frame
from endpoint.validate import MeasuredRun, compare
from sim.pricing.profile import Device, LinearFit, Ops, Profile, Table, load_profile, save_profile
from sim.scenario.load import scenario_from_dict
from sim.traffic import build_workload
from tests.endpoint.fake_server import Cost
from tests.endpoint.virtual_time import run_on_fake

COST = Cost()


def known_profile(path):
    """The fake's step cost and per-request overhead, as ``calibrate --endpoint`` would fit them."""
    step = LinearFit(features=["const", "num_tokens", "num_seqs"], coef=[COST.c0, COST.c_tok, COST.c_seq], r2=1.0)
    p = Profile(schema_version=1, source="endpoint", created="now", device=Device(name="fake", type="cpu"),
                model="tiny-llama-12m", model_shape={}, dtype="fp32", ops=Ops(linear=Table(x=[1, 2], seconds=[0, 0])),
                step=step, prefer="step", request_overhead_s=COST.overhead,
                grid={"scheduler": {"max_num_seqs": COST.max_seqs, "chunk_size": COST.budget,
                                    "block_size": COST.block_size}})
    return save_profile(p, path)


def scenario(profile, arrival):
    return scenario_from_dict({
        "name": "fake-check", "seed": 2, "model": "tiny-llama-12m",
        "cost": {"model": "profile", "profile": str(profile)},
        "hardware": {"kv_blocks": COST.kv_blocks},
        "scheduler": {"policy": "chunked-prefill", "chunk_size": COST.budget, "max_num_seqs": COST.max_seqs,
                      "block_size": COST.block_size},
        "workload": {"num_requests": 24, "arrival": arrival,
                     "prompt_len": {"dist": "uniform", "min": 16, "max": 300},
                     "output_len": {"dist": "uniform", "min": 4, "max": 24}}}, "<fake-check>")


def measured(monkeypatch, sc) -> MeasuredRun:
    from endpoint.loadgen import Request
    from endpoint.replay import closed_loop

    w = build_workload(sc)
    closed, think = closed_loop(sc)
    reqs = [Request(i, float(w.arrival[i]), list(range(int(w.prompt_len[i]))), int(w.prompt_len[i]),
                    int(w.output_len[i])) for i in range(len(w.arrival))]
    res = run_on_fake(monkeypatch, reqs, COST, closed=closed, think_time_s=think)
    req = requests_frame(res, sc.slo, w.class_names, w.class_id)
    return MeasuredRun(req, {}, res.client, res.duration_s, res.mode, itl_frame(res))


@pytest.mark.parametrize("arrival", [{"process": "poisson", "rate": 6.0}, {"process": "closed", "concurrency": 4}])
def test_a_profile_of_the_known_server_predicts_its_requests(monkeypatch, tmp_path, arrival):
    sc = scenario(known_profile(tmp_path / "known.json"), arrival)
    runs = [measured(monkeypatch, sc), measured(monkeypatch, sc)]
    assert all((r.requests["status"] == "finished").all() for r in runs)
    v = compare(sc, sc.cost.profile, runs, {}, source="<fake-check>", log=None)
    j = v.to_json()
    assert j["requests"]["joined"] == 24 and j["endpoint"]["loop"] == ("closed" if "concurrency" in arrival else "open")
    assert not [w for w in v.warnings if "scheduler" in w]  # the scenario's scheduler is the profile's
    for m in ("ttft", "tpot", "e2e"):
        assert v.spread[m]["median"] == 0 and v.spread[m]["max"] == 0  # virtual time: runs agree exactly
    if "rate" in arrival:  # the sends are the measured ones: the simulation is the fake's schedule
        assert all(v.errors[m]["max"] < 1e-9 for m in ("ttft", "tpot", "e2e")), v.errors
    else:  # the simulator's own closed loop decides the sends (3% off here, on E2E and TTFT medians)
        assert v.errors["e2e"]["median"] < 0.05 and v.errors["ttft"]["median"] < 0.05, v.errors
    # each run's plain decode steps, priced by the profile for their batch and context: the
    # fake's decode step is the profile's
    assert len(j["decode_steps"]) == 2
    for d in j["decode_steps"]:
        assert d["n"] > 20 and abs(d["rel_diff"]) < 1e-9, d
    np.testing.assert_array_equal(runs[0].itl["gap_s"], runs[1].itl["gap_s"])


def test_validate_endpoint_writes_and_judges(fake_server, monkeypatch, tmp_path, capsys):
    """The door of ``validate --endpoint``: the server's runs (here measured on the fake's
    virtual clock, in place of the real-time measurement) compared and written, and judged
    against ``--max-error``."""
    import json

    import yaml

    from sim.cli.app import main

    path = known_profile(tmp_path / "known.json")
    sc = scenario(path, {"process": "poisson", "rate": 6.0})
    data = yaml.safe_load(yaml.safe_dump(sc.model_dump(mode="json", exclude={"base_dir"})))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    seen = {}

    def validate(scenario_, profile_path, url, model, *, source, out, log, **kw):
        seen.update(url=url, model=model, out=out)
        return compare(scenario_, profile_path, [measured(monkeypatch, scenario_)], {}, source=source, log=None)

    monkeypatch.setattr("endpoint.validate.validate", validate)
    out = tmp_path / "v"
    (out / "steps.csv").parent.mkdir()
    (out / "steps.csv").write_text("an engine validation's\n")
    assert main(["validate", str(tmp_path / "s.yaml"), "--endpoint", fake_server, "--profile", str(path),
                 "--out", str(out), "--max-error", "1e-9"]) == 0
    assert seen["model"] == "fake" and seen["out"] == out
    v = json.loads((out / "validation.json").read_text())
    assert v["requests"]["joined"] == 24 and (out / "report.html").is_file()
    assert (out / "requests.csv").read_text().startswith("request_id,")
    assert not (out / "steps.csv").exists()  # not this validation's
    assert "E2E" in capsys.readouterr().out
    rec = load_profile(path).validation  # recorded for the error band of runs priced by it
    assert rec.against.startswith("the endpoint http") and rec.against.endswith("(fake)") and rec.requests == 24
    assert rec.errors["e2e"] == pytest.approx(v["errors"]["e2e"]["median"])
