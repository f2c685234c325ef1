"""CSV/JSON output names its latency unit as vllm bench serve does (``p99_ttft_ms``, in ms);
summary.json keeps seconds under the plain keys."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sim.cli.app import main
from sim.results.metrics import ms_keys
from tests.conftest import REPO


def test_ms_keys_renames_and_scales_only_latencies():
    df = pd.DataFrame({"config": ["a"], "ttft_p99": [0.25], "e2e_mean": [1.5], "queueing_delay_p50": [0.001],
                       "slo_attainment": [0.9], "goodput_per_gpu": [3.0]})
    out = ms_keys(df)
    assert list(out.columns) == ["config", "p99_ttft_ms", "mean_e2e_ms", "p50_queueing_delay_ms",
                                 "slo_attainment", "goodput_per_gpu"]
    assert out.iloc[0].tolist() == ["a", 250.0, 1500.0, 1.0, 0.9, 3.0]
    assert df["ttft_p99"].iloc[0] == 0.25  # the input is left alone


def test_compare_json_has_ms_keys(tmp_path, capsys):
    q = str(REPO / "scenarios" / "quickstart.yaml")
    code = main(["compare", q, q, "--set", "workload.num_requests=60", "--format", "json",
                 "--out", str(tmp_path / "cmp")])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert "p99_ttft_ms" in rows[0] and "ttft_p99" not in rows[0]
    assert rows[0]["p99_ttft_ms"] == pytest.approx(rows[1]["p99_ttft_ms"])
    assert 1 < rows[0]["p99_ttft_ms"] < 60_000  # milliseconds, not seconds
    written = (tmp_path / "cmp" / "summary.csv").read_text().splitlines()[0].split(",")
    assert "p99_ttft_ms" in written and "ttft_p99" not in written
