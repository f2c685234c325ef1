"""Replications: intervals over seeds, answers chosen on the interval, capacity with its
interval and its edges, reasons for every ✗ — with fake runs whose figures per seed are known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.study.driver import execute_plan
from sim.study.intervals import FAILS, MEETS, UNCERTAIN, interval, t_quantile, verdict
from sim.study.plan import RunSpec, plan_study
from sim.study.runners import SerialRunner
from sim.study.schema import load_study
from sim.study.store import RunStore

from .helpers import SMALL, write_study


def test_t_interval_of_known_values():
    iv = interval([1.0, 2.0, 3.0], "goodput")
    half = 4.303 * 1.0 / math.sqrt(3)
    assert (iv.mean, iv.lo, iv.hi, iv.n) == pytest.approx((2.0, max(2.0 - half, 0.0), 2.0 + half, 3))
    assert interval([0.95, 0.99], "slo_attainment").hi == 1.0  # a share's interval stays in [0, 1]
    wide = interval([0.5, 53.0], "max_rate")  # two seeds far apart: t's half-width passes zero
    assert wide.lo == 0.0 and wide.hi == pytest.approx(26.75 + 12.706 * 52.5 / math.sqrt(2) / math.sqrt(2))
    one = interval([7.0, None], "goodput")
    assert one.point and (one.mean, one.lo, one.hi) == (7.0, 7.0, 7.0)


def test_t_quantiles_beyond_the_table_continue_it():
    assert t_quantile(2) == 4.303 and t_quantile(30) == 2.042
    assert t_quantile(31) == pytest.approx(2.0395, abs=2e-4)
    assert t_quantile(120) == pytest.approx(1.9799, abs=2e-4)
    assert t_quantile(10**6) == pytest.approx(1.95996, abs=1e-4)


def test_percentiles_take_a_deterministic_bootstrap_within_the_seeds_values():
    values = [0.8, 1.0, 1.5, 1.1]
    a, b = interval(values, "ttft_p99"), interval(values, "ttft_p99")
    assert a == b
    assert min(values) <= a.lo < a.mean < a.hi <= max(values)
    assert a.hi - a.lo < interval(values, "ttft_mean").hi - interval(values, "ttft_mean").lo  # narrower than t


def test_verdict_on_the_interval_with_its_reasons():
    ok = [{"slo_attainment": 1.0, "ttft_p99": 0.5}] * 2
    assert verdict(ok, ["ok"] * 2, [None] * 2, 0.99, {"ttft_p99": 1.0}) == (MEETS, "")
    slow = [{"slo_attainment": 0.93, "ttft_p99": 1.42}]
    v, why = verdict(slow, ["ok"], [None], 0.99, {"ttft_p99": 1.0})
    assert v == FAILS and why == "SLO attainment 93.0% < 99.0%; ttft_p99 1.42 s > 1 s"
    straddle = [{"slo_attainment": a, "ttft_p99": 0.1} for a in (0.85, 0.93, 0.97)]
    v, why = verdict(straddle, ["ok"] * 3, [None] * 3, 0.9, {"ttft_p99": 1.0})
    assert v == UNCERTAIN and why.startswith("SLO attainment 91.6% (") and why.endswith("straddles 90.0%")
    v, why = verdict(ok, ["ok", "error"], [None, "boom"], 0.9, {})
    assert v == FAILS and why == "run failed (1 of 2 seeds): boom"


# A fake study: each seed's run at each rate has figures fixed in advance.
ATTAINMENT = {1: [0.85, 0.93, 0.97], 2: [0.99, 1.0, 0.98], 3: [0.5, 0.5, 0.6]}  # by replicas, per seed
THRESHOLD = [8.2, 10.2, 9.4]  # per seed: the highest rate that passes (the A100 example)


def seed_of(spec: RunSpec) -> int:
    return spec.data.get("seed", 0)


def by_replicas(spec: RunSpec) -> dict:
    att = ATTAINMENT[spec.data.get("replicas", 1)][seed_of(spec)]
    return {"key": spec.key, "status": "ok", "error": None, "wall_s": 0.0, "warnings": [],
            "summary": {"slo_attainment": att, "ttft_p99": 0.1, "offered_rate": 30.0 + seed_of(spec)}}


def by_threshold(scale: float = 1.0):
    def run(spec: RunSpec) -> dict:
        rate = spec.rate
        ok = rate <= THRESHOLD[seed_of(spec)] * scale
        return {"key": spec.key, "status": "ok", "error": None, "wall_s": 0.0, "warnings": [],
                "summary": {"slo_attainment": 1.0 if ok else 0.5, "goodput_per_gpu": rate,
                            "offered_rate": rate * 1.17, "ttft_p99": 0.1}}
    return run


def study(tmp_path, objective: dict, vary: dict | None = None, seeds: int = 3, fn=by_replicas):
    path = write_study(tmp_path, {"vary": vary or {}, "objective": objective, "seeds": seeds}, SMALL)
    plan = plan_study(load_study(path), path)
    return execute_plan(plan, RunStore(tmp_path / "out"), SerialRunner(fn))


def test_cheapest_is_chosen_on_the_interval(tmp_path):
    run = study(tmp_path, {"kind": "cheapest", "rate": 30, "slo_target": 0.9},
                {"grid": {"replicas": [1, 2, 3]}})
    out = run.outcome
    assert out.best["replicas"] == 2  # the cheaper replicas=1 only straddles the target
    rows = out.configs.set_index("replicas")
    assert list(out.configs["replicas"]) == [2, 1, 3]  # meets, uncertain, fails
    assert rows.loc[1, "verdict"] == UNCERTAIN and "straddles 90.0%" in rows.loc[1, "why"]
    assert rows.loc[3, "verdict"] == FAILS and rows.loc[3, "why"].endswith("< 90.0%")
    assert rows.loc[1, "slo_attainment"] == pytest.approx(np.mean(ATTAINMENT[1]))
    assert rows.loc[2, "seeds"] == 3
    assert rows.loc[2, "offered_rate"] == pytest.approx(31.0)  # the realised rate beside the stated 30
    assert "on 3 seeds" in out.note
    assert sorted(out.seed_runs["seed"].unique()) == [0, 1, 2] and len(out.seed_runs) == 9
    one = out.seed_runs.set_index(["replicas", "seed"])
    assert one.loc[(1, 0), "why"] == "SLO attainment 85.0% < 90.0%" and not one.loc[(1, 0), "meets_slo"]


def test_capacity_is_the_mean_of_each_seeds_highest_passing_rate(tmp_path):
    run = study(tmp_path, {"kind": "max_rate", "bracket": [1, 64], "rel_tol": 0.001}, fn=by_threshold())
    best = run.outcome.best
    expected = interval(THRESHOLD, "max_rate")
    assert best["max_rate"] == pytest.approx(expected.mean, rel=2e-3)
    assert best["max_rate_lo"] == pytest.approx(expected.lo, rel=1e-2)
    assert best["max_rate_hi"] == pytest.approx(expected.hi, rel=1e-2)
    assert best["capacity"].startswith("9.2") and "(6.7" in best["capacity"]


def test_capacity_at_the_edges_of_the_bracket(tmp_path):
    high = study(tmp_path / "hi", {"kind": "max_rate", "bracket": [1, 4]}, fn=by_threshold())
    assert high.outcome.best["capacity"] == "≥ 4" and high.outcome.best["outcome"] == "above_bracket"
    low = study(tmp_path / "lo", {"kind": "max_rate", "bracket": [20, 40]}, fn=by_threshold())
    row = low.outcome.configs.iloc[0]
    assert low.outcome.best is None and row["capacity"] == "< 20"
    assert row["why"].startswith("fails at the lowest rate tried, 20 req/s: SLO attainment 50.0% < 90.0%")


def test_curves_never_report_a_rate_that_fails_and_mark_the_edges(tmp_path):
    run = study(tmp_path, {"kind": "curves", "rates": [2, 4, 9, 12], "rank_by": "goodput_per_gpu"},
                fn=by_threshold(), seeds=1)
    best = run.outcome.best
    # goodput per GPU grows with the rate, but 9 and 12 fail on seed 0 (threshold 8.2)
    assert best["at_rate"] == 4 and best["goodput_per_gpu"] == 4 and best["capacity"] == "4"
    assert best["offered_rate"] == pytest.approx(4 * 1.17)
    runs = run.outcome.runs
    assert list(runs["offered_rate"]) == pytest.approx([r * 1.17 for r in (2, 4, 9, 12)])
    assert runs.columns.get_loc("offered_rate") == runs.columns.get_loc("rate") + 1
    assert set(runs[~runs["meets_slo"]]["why"]) == {"SLO attainment 50.0% < 90.0%"}
    top = study(tmp_path / "top", {"kind": "curves", "rates": [1, 2]}, fn=by_threshold(), seeds=1)
    assert top.outcome.best["capacity"] == "≥ 2"
    none = study(tmp_path / "none", {"kind": "curves", "rates": [20, 30]}, fn=by_threshold(), seeds=1)
    row = none.outcome.configs.iloc[0]
    assert none.outcome.best is None and row["capacity"] == "< 20"
    assert row["why"] == "no rate meets the SLO; at 20 req/s: SLO attainment 50.0% < 90.0%"


@pytest.mark.parametrize("order", [["continuous", "static"], ["static", "continuous"]])
def test_a_tie_goes_to_the_winner_the_rule_names(tmp_path, order):
    run = study(tmp_path, {"kind": "max_rate", "bracket": [1, 64], "rel_tol": 0.01},
                {"grid": {"scheduler.policy": order}}, seeds=2, fn=by_threshold())
    out = run.outcome
    assert out.configs["max_rate"].nunique() == 1  # the same capacity, GPUs and price: a tie
    assert out.best["scheduler.policy"] == order[0]  # ... broken by the configurations' order
    assert "ties broken by lower $/h, then fewer GPUs" in out.note


def test_the_cli_seeds_flag_overrides_the_study_and_its_runs_resume(tmp_path, capsys):
    import json

    from .helpers import run_cli

    path = write_study(tmp_path, {"objective": {"kind": "cheapest", "rate": 10}, "seeds": 1}, SMALL)
    code, _ = run_cli(capsys, "study", path, "--out", tmp_path / "out", "--jobs", "1", "--seeds", "2",
                      "--format", "json")
    assert code == 0
    assert (tmp_path / "out" / "seed_runs.csv").is_file()
    code, text = run_cli(capsys, "study", path, "--out", tmp_path / "out", "--jobs", "1", "--seeds", "2",
                         "--format", "json")
    assert code == 0 and "2 runs (2 reused, 0 failed)" in text
    doc = json.loads(text[:text.rindex("}") + 1])
    assert doc["seeds"] == 2
    best = doc["best"]
    assert best["seeds"] == 2 and best["slo_attainment_lo"] <= best["slo_attainment"] <= best["slo_attainment_hi"]
    assert best["p99_ttft_ms_lo"] <= best["p99_ttft_ms"] <= best["p99_ttft_ms_hi"]  # in ms, like the value


def test_seeds_must_be_a_positive_whole_number(tmp_path):
    from sim.study.schema import StudyError

    path = write_study(tmp_path, {"objective": {"kind": "cheapest"}, "seeds": 0}, SMALL)
    with pytest.raises(StudyError, match="seeds"):
        load_study(path)


def test_curves_on_seeds_give_each_seeds_capacity_with_its_interval(tmp_path):
    run = study(tmp_path, {"kind": "curves", "rates": [2, 4, 8, 9, 10, 11]}, fn=by_threshold())
    best = run.outcome.best
    per_seed = [8, 10, 9]  # each seed's highest passing rate among those tried
    expected = interval(per_seed, "seed_max_rate")
    assert (best["seed_max_rate"], best["seed_max_rate_lo"], best["seed_max_rate_hi"]) == pytest.approx(
        (expected.mean, expected.lo, expected.hi))
    assert best["capacity"] == "8"  # at 9 one seed of three fails: the interval straddles the target
    at9 = run.outcome.runs.set_index("rate").loc[9]
    assert at9["verdict"] == UNCERTAIN and at9["seeds"] == 3


def test_a_dry_run_and_the_estimate_count_every_seed(tmp_path, capsys):
    from sim.study.estimate import estimate

    from .helpers import run_cli

    path = write_study(tmp_path, {"vary": {"grid": {"replicas": [1, 2]}},
                                  "objective": {"kind": "curves", "rates": [1, 2, 3]}}, SMALL)
    code, text = run_cli(capsys, "study", path, "--dry-run", "--seeds", "4")
    assert code == 0 and "2 configurations on 4 seed(s)" in text
    study_ = load_study(path)
    assert estimate(plan_study(study_, path), 1).runs == 6
    assert estimate(plan_study(study_, path, seeds=4), 1).runs == 24


def test_the_answer_says_when_the_runner_up_is_within_its_interval(tmp_path):
    from sim.study.report import answer_lines

    wide = study(tmp_path / "w", {"kind": "max_rate", "bracket": [1, 64], "rel_tol": 0.01},
                 {"grid": {"replicas": [1, 2]}}, fn=by_threshold())  # the same seeds' rates: overlapping
    notes = [v for k, v in answer_lines(wide) if k == "note"]
    assert notes == ["replicas=2 is within the answer's 95% interval: more seeds may change the order"]

    def apart(spec):  # replicas=2 sustains 10 × the rate
        return by_threshold(10.0 if spec.data.get("replicas") == 2 else 1.0)(spec)

    clear = study(tmp_path / "c", {"kind": "max_rate", "bracket": [1, 200], "rel_tol": 0.01},
                  {"grid": {"replicas": [1, 2]}}, fn=apart)
    assert clear.outcome.best["replicas"] == 2
    assert [k for k, _ in answer_lines(clear)].count("note") == 0


def test_the_tables_and_report_carry_intervals_reasons_and_the_offered_rate(tmp_path):
    import json

    import pandas as pd

    from sim.study.report import write_outputs

    run = study(tmp_path, {"kind": "cheapest", "rate": 30, "slo_target": 0.9}, {"grid": {"replicas": [1, 2, 3]}})
    write_outputs(run, tmp_path / "out", plotly="cdn")
    configs = pd.read_csv(tmp_path / "out" / "configs.csv").set_index("replicas")
    assert configs.loc[3, "why"].startswith("SLO attainment 53.3% (") and configs.loc[1, "verdict"] == "uncertain"
    assert {"slo_attainment_lo", "slo_attainment_hi", "p99_ttft_ms_lo", "seeds"} <= set(configs.columns)
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert list(runs.columns[list(runs.columns).index("rate"):][:2]) == ["rate", "offered_rate"]
    seed_runs = pd.read_csv(tmp_path / "out" / "seed_runs.csv")
    assert len(seed_runs) == 9 and set(seed_runs["seed"]) == {0, 1, 2}
    assert json.loads((tmp_path / "out" / "answer.json").read_text())["seeds"] == 3
    page = (tmp_path / "out" / "report.html").read_text()
    assert "why not" in page and "straddles 90.0%" in page and "? uncertain" in page
    assert "31 (28.5–33.5)" in page  # the offered rate (30, 31, 32 on the seeds) with its interval
    assert "3 seeds: mean of the seeds with a 95% interval" in page


def test_when_nothing_qualifies_the_uncertain_ones_are_named(tmp_path, capsys):
    from sim.study.cli import print_answer
    from sim.study.report import none_qualifies

    run = study(tmp_path, {"kind": "cheapest", "rate": 30, "slo_target": 0.9}, {"grid": {"replicas": [1, 3]}})
    assert run.outcome.best is None
    assert none_qualifies(run.outcome).startswith("1 is uncertain (the 95% interval straddles a limit)")
    from sim.cli.console import console

    print_answer(run, console)
    assert "no configuration qualifies 1 is uncertain" in " ".join(capsys.readouterr().out.split())
