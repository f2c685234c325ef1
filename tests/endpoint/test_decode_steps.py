"""A measured run's decode steps (``endpoint.decode_steps``): batch, context and prefill overlap
read off the token times, and plain steps priced by the profile through the pricing core."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from endpoint.decode_steps import compare_steps, decode_gaps
from tests.endpoint.test_floor import floored_profile, step_seconds
from tests.sim.helpers import scenario


def two_requests() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Steps end every 40 ms (with a little client jitter). A (prompt 100) has tokens at
    0, 40, 80, 120, 160 ms; B (prompt 50) is sent at 50 ms, its prefill shares the step that
    ends at 120 ms (its first token), then it decodes in the steps ending at 160 and 200 ms."""
    req = pd.DataFrame({"request_id": [0, 1], "arrival": [-0.2, 0.05], "prompt_tokens": [100, 50],
                        "first_token": [0.0, 0.1203], "status": ["finished", "finished"]})
    itl = pd.DataFrame({"request_id": [0, 0, 0, 0, 1, 1], "token_index": [1, 2, 3, 4, 1, 2],
                        "gap_s": [0.04, 0.04, 0.04, 0.04, 0.0398, 0.04]})
    return req, itl


def test_decode_gaps_reads_batch_context_and_prefill_overlap():
    g = decode_gaps(*two_requests()).set_index(["request_id", "token_index"])
    assert g["batch"].tolist() == [1, 1, 1, 2, 2, 1]
    # context = prompt + tokens so far (the simulator's Σ (cached + 1))
    assert g["context"].tolist() == [101, 102, 103, 104 + 51, 104 + 51, 52]
    # B was on its way in (sent at 50 ms, first token at 120 ms) during A's 2nd and 3rd gaps
    assert g["mixed"].tolist() == [False, True, True, False, False, False]
    np.testing.assert_allclose(g["gap_s"], [0.04, 0.04, 0.04, 0.04, 0.0398, 0.04], atol=1e-12)


def test_plain_steps_are_priced_by_the_profile(tmp_path):
    from sim.pricing import make_cost_model

    cost = make_cost_model(scenario(cost={"model": "profile", "profile": floored_profile(tmp_path / "p.json")}))
    gaps = decode_gaps(*two_requests())
    c = compare_steps(cost, gaps)
    plain = gaps[~gaps["mixed"]]
    expected = [step_seconds({"num_tokens": b, "num_seqs": b, "num_sampled": b, "prefill_attn": 0,
                              "decode_context": ctx}) for b, ctx in zip(plain["batch"], plain["context"], strict=True)]
    assert c["n"] == 4  # the two mixed gaps are left out
    assert c["priced_mean_s"] == pytest.approx(np.mean(expected), rel=1e-12)
    assert c["measured_mean_s"] == pytest.approx(plain["gap_s"].mean())
    assert c["rel_diff"] == pytest.approx(c["priced_mean_s"] / c["measured_mean_s"] - 1)
    assert c["by_batch"][2]["n"] == 2 and c["by_batch"][2]["context_per_seq"] == pytest.approx(155 / 2)
    # a step of two decodes reads both contexts: it costs more than the lone decode before it
    assert c["by_batch"][2]["priced_mean_s"] > c["by_batch"][1]["priced_mean_s"]


def test_read_runs_keeps_the_gaps_and_the_diagnosis_names_the_plain_steps(tmp_path):
    import json

    from endpoint.validate import decode_diagnosis, read_runs

    req, itl = two_requests()
    for k in (1, 2):
        d = tmp_path / f"run{k}"
        d.mkdir()
        req.to_parquet(d / "requests.parquet")
        if k == 1:  # the second run as an older validation wrote it: no gaps
            itl.to_parquet(d / "itl.parquet")
        (d / "summary.json").write_text(json.dumps({"duration_s": 1.0, "mode": "measured (open loop)"}))
    runs = read_runs(tmp_path)
    assert len(runs) == 2 and runs[1].itl is None
    pd.testing.assert_frame_equal(runs[0].itl, itl)
    line = decode_diagnosis([{"n": 4, "measured_mean_s": 0.040, "priced_mean_s": 0.036, "rel_diff": -0.1},
                             {"n": 0}, {"n": 3, "measured_mean_s": 0.05, "priced_mean_s": 0.036, "rel_diff": -0.28}])
    assert line == ["plain decode steps: the profile prices 36.0 ms for the measured batches and contexts, "
                    "measured 40.0 ms (-10.0%; run 3: -28.0%)"]
    assert decode_diagnosis([]) == [] and decode_diagnosis([{"n": 0}]) == []
    assert decode_diagnosis([{"n": 0}, {"n": 2, "measured_mean_s": 0.04, "priced_mean_s": 0.04, "rel_diff": 0.0}])[0] \
        .startswith("plain decode steps: run 2: the profile prices 40.0 ms")


def test_the_results_readme_shows_plain_decode_per_run_apart_from_what_is_off():
    import json
    from pathlib import Path

    from benchmarks.endpoint_validation import readme

    summary = json.loads((Path(__file__).parents[2] / "benchmarks/results/vllm-cpu/summary.json").read_text())
    row = dict(summary["workloads"][0], workload="w", diagnosis=[
        "E2E: median error 6.6%", "decode: simulated 2184 ms vs measured 2440 ms per request (-8.5% of E2E)",
        "plain decode steps: the profile prices 37.7 ms ..."],
        decode_steps=[{"n": 5, "rel_diff": -0.095}, {"n": 0}, {"n": 7, "rel_diff": 0.066}])
    old = {k: v for k, v in row.items() if k != "decode_steps"} | {"workload": "old"}  # an older summary's row
    lines = readme({**summary, "workloads": [row, old]}).splitlines()
    header = next(line for line in lines if line.startswith("| workload"))
    cells = [c.strip() for c in next(line for line in lines if line.startswith("| w |")).split("|")[1:-1]]
    assert len(cells) == header.count("|") - 1
    col = [c.strip() for c in header.split("|")[1:-1]].index("plain decode")
    assert cells[col] == "-9.5% / +6.6%"
    assert cells[-1] == "decode: simulated 2184 ms vs measured 2440 ms per request (-8.5% of E2E)"
    old_cells = [c.strip() for c in next(line for line in lines if line.startswith("| old |")).split("|")[1:-1]]
    assert old_cells[col] == "–"


def test_the_command_names_a_folder_that_is_not_a_validations_results(tmp_path, capsys):
    from endpoint.decode_steps import main

    assert main([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    (tmp_path / "profile.scenario.yaml").write_text(
        "model: {hf_config: missing-model, name: m}\ncost: {model: profile}\n")
    (tmp_path / "profile.json").write_text("{}")
    assert main([str(tmp_path)]) == 2  # the profile's model is gone: a message, not a traceback
    assert "error:" in capsys.readouterr().err
