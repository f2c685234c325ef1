"""The comparison rules the engine and endpoint validations share: spread, stages, diagnosis."""

import numpy as np
import pandas as pd

from calibration.compare import breakdown, diagnose, error_stats, join, spread
from calibration.validate import stage_means


def frame(e2e, ttft, scale=1.0):
    n = len(e2e)
    e2e, ttft = np.asarray(e2e) * scale, np.asarray(ttft) * scale
    return pd.DataFrame({"request_id": np.arange(n), "arrival": np.zeros(n), "prompt_tokens": 10,
                         "output_tokens": 11, "status": "finished", "ttft": ttft, "tpot": (e2e - ttft) / 10,
                         "e2e": e2e, "queueing_delay": ttft / 4, "preemptions": 0,
                         "first_scheduled": ttft / 4, "first_token": ttft, "completion": e2e})


def test_spread_is_the_second_run_against_the_first():
    a = frame([1.0, 2.0, 4.0], [0.1, 0.2, 0.4])
    b = frame([1.0, 2.0, 4.0], [0.1, 0.2, 0.4], scale=1.1)
    s = spread(a, b)
    assert abs(s["e2e"]["median"] - 0.1) < 1e-12 and abs(s["e2e"]["bias"] - 0.1) < 1e-12
    assert error_stats(join(a, b))["ttft"] == s["ttft"]


def test_stages_add_up_and_diagnosis_names_the_part_that_is_off():
    real = frame([2.0, 4.0], [0.4, 0.8])
    sim = real.copy()
    sim["completion"] = sim["completion"] * 1.2  # decoding 20%+ slower in the simulation
    sim["e2e"] = sim["completion"]
    r, s = stage_means(real), stage_means(sim)
    assert abs(r["wait_s"] + r["prefill_s"] + r["decode_s"] - r["e2e_s"]) < 1e-12
    b = breakdown(r, s)
    assert set(b) == {"wait", "prefill", "decode", "e2e"}
    assert b["wait"]["diff"] == 0 and b["decode"]["diff"] > 0
    assert abs(b["decode"]["share_of_e2e"] - b["e2e"]["share_of_e2e"]) < 1e-12
    sim_e = error_stats(join(real, sim))
    text = diagnose(sim_e, spread(real, real), b)
    assert any(t.startswith("decode:") for t in text)
    assert not any(t.startswith(("wait:", "prefill:")) for t in text)
    assert any("over-predicts" in t and "differ by 0.0%" in t for t in text)
