"""``servesim run --seeds N``: every seed's run kept in its own folder, the headline figures with
their interval at the top, the same on every invocation, and never mixed with a single run's."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli.app import main
from sim.study.intervals import interval

TINY = {"name": "tiny", "model": "llama-3-8b",
        "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate": 20},
                     "prompt_len": {"dist": "uniform", "min": 32, "max": 256},
                     "output_len": {"dist": "uniform", "min": 4, "max": 32}},
        "slo": {"ttft_s": 0.05}}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "seed": 5}))
    return path


def run(*argv) -> int:
    return main([str(a) for a in argv])


def test_run_on_three_seeds_writes_each_and_the_intervals(scenario, tmp_path, capsys):
    out = tmp_path / "r"
    assert run("run", scenario, "--seeds", "3", "--out", out, "--plotlyjs", "cdn") == 0
    text = capsys.readouterr().out
    assert "3 seeds (5, 6, 7)" in text and "mean (95% interval)" in text
    doc = json.loads((out / "summary.json").read_text())
    assert doc["seeds"] == [5, 6, 7]
    per_seed = [json.loads((out / f"seed-{s}" / "summary.json").read_text())["summary"] for s in (5, 6, 7)]
    for metric in ("slo_attainment", "goodput", "offered_rate", "ttft_p99", "tpot_p50"):
        f = doc["summary"][metric]
        values = [p[metric] for p in per_seed]
        assert f["values"] == values
        expected = interval(values, metric)
        assert (f["mean"], f["lo"], f["hi"]) == pytest.approx((expected.mean, expected.lo, expected.hi))
        assert f["lo"] <= f["mean"] <= f["hi"]
    assert len({p["offered_rate"] for p in per_seed}) == 3  # three different draws
    for s in (5, 6, 7):
        config = json.loads((out / f"seed-{s}" / "summary.json").read_text())["config"]
        assert config["seed"] == s and (out / f"seed-{s}" / "requests.parquet").is_file()
    assert (out / "seeds.csv").read_text().count("\n") == 4
    first = (out / "summary.json").read_text()
    assert run("run", scenario, "--seeds", "3", "--out", out, "--plotlyjs", "cdn") == 0
    assert (out / "summary.json").read_text() == first  # deterministic


def test_fewer_seeds_or_a_single_run_leave_no_stale_seed_folders(scenario, tmp_path, capsys):
    out = tmp_path / "r"
    assert run("run", scenario, "--seeds", "3", "--out", out, "--plotlyjs", "cdn") == 0
    assert run("run", scenario, "--seeds", "2", "--out", out, "--plotlyjs", "cdn") == 0
    assert sorted(p.name for p in out.glob("seed-*")) == ["seed-5", "seed-6"]
    assert run("run", scenario, "--out", out, "--plotlyjs", "cdn") == 0
    assert not list(out.glob("seed-*")) and not (out / "seeds.csv").exists()
    assert json.loads((out / "summary.json").read_text())["config"]["seed"] == 5
    capsys.readouterr()


def test_bad_seeds_are_refused(scenario, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        run("run", scenario, "--seeds", "0")
    assert e.value.code == 2
    assert run("run", scenario, "--seeds", "2", "--profile-sim", "--out", tmp_path / "x") == 2
    assert "--profile-sim" in capsys.readouterr().err
