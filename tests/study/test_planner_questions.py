"""The questions issue 32 asks a planner to answer in one command, each through the CLI with
its cost per 1M tokens (and its interval, on seeds): (a) the fewest H100s for Llama-3-70B at
40 req/s; (b) chunked vs continuous on the Azure trace; (c) prefill vs decode GPUs at 20 req/s;
(d) a 2× burst for 60 s: peak queue and time to recover; (e) H100 vs H200 vs A100 for
Llama-3-8B, cheapest per 1M tokens under the SLO. Runs are short (20–60 s of arrivals)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sim.cli.app import main
from sim.study import planner

REPO = Path(__file__).resolve().parents[2]
AZURE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SEEDS = "2"  # seeds per configuration and rate in these tests: each figure with its 95% interval
RUN = ["--seeds", SEEDS, "--jobs", "2"]


def _answer(text: str, interval: bool = True) -> str:
    """The plan's one-paragraph answer, checked to carry its seeds and its cost per 1M tokens (with
    its interval: a trace's replay is the same on every seed, so its interval has no width)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("answer: ") and "per 1M tokens" in ln]
    assert lines, text
    line = lines[-1]
    assert f"on {SEEDS} seeds (95% intervals in parentheses)" in line
    assert bool(re.search(r"\$[0-9.]+ \(\$[0-9.]+–\$[0-9.]+\) per 1M tokens", line)) == interval, line
    return line


def _best(out: Path) -> dict:
    return json.loads((out / "answer.json").read_text())["best"]


def test_a_fewest_h100s_for_llama3_70b_at_40_rps(tmp_path, capsys):
    out = tmp_path / "a"
    assert main(["plan", "--model", "llama-3-70b", "--gpu", "H100", "--rate", "40",
                 "--slo", "ttft_p99=1s,tpot_p99=50ms", "--duration", "20", "--out", str(out), *RUN]) == 0
    text = capsys.readouterr().out
    line = _answer(text)
    assert "H100-SXM" in line and "meets the SLO at 40 req/s" in line and "per 1M output tokens" in line
    configs = pd.read_csv(out / "configs.csv")
    best = _best(out)
    meets = configs[configs["meets_slo"].astype(bool)]
    assert best["num_gpus"] == meets["num_gpus"].min()  # the fewest GPUs that meet the SLO
    assert f"{best['num_gpus']} GPUs" in line and f"{best['cost_per_hour']:,.2f}/h" in line
    # the answer is bracketed: the same layout with one replica fewer was run at 40 req/s and failed
    n, layout = best["config"].split(" × ", 1)
    fewer = configs[configs["config"] == f"{int(n) - 1} × {layout}"]
    assert len(fewer) == 1 and not bool(fewer["meets_slo"].iloc[0])
    # TP 1 cannot hold a 70B model on an 80 GB GPU: the sizing study says so rather than dropping it
    sizing = pd.read_csv(out / "sizing" / "configs.csv")
    assert sizing.loc[sizing["hardware.tp"] == 1, "outcome"].tolist() == ["skipped"]
    assert best["cost_per_1m_tokens"] > 0
    # the study it ran is written beside its results: servesim study runs it again, every run stored
    assert main(["study", str(out / planner.PLAN_FILE), "--out", str(out), "--jobs", "1"]) == 0
    assert "0 failed" in capsys.readouterr().out and _best(out)["config"] == best["config"]


@pytest.mark.skipif(not AZURE.is_file(), reason=f"the Azure conversation trace is not at {AZURE}")
def test_b_chunked_vs_continuous_on_the_azure_trace(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["plan", "--max-rate", "--scenario", str(REPO / "scenarios" / "azure-conversation.yaml"),
                 "--policy", "continuous,chunked-prefill", "--slo", "ttft_p99=2s,tpot_p99=100ms",
                 "--bracket", "1,16", "--duration", "60", "--out", str(out), *RUN]) == 0
    line = _answer(capsys.readouterr().out, interval=False)
    configs = pd.read_csv(out / "configs.csv").set_index("scheduler.policy")
    assert set(configs.index) == {"continuous", "chunked-prefill"}
    assert configs["max_rate"].notna().all()
    winner = configs["max_rate"].idxmax()
    assert _best(out)["scheduler.policy"] == winner and f"policy={winner}" in line and "sustains" in line


def test_c_prefill_vs_decode_gpus_at_20_rps(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["plan", "--rate", "20", "--scenario", str(REPO / "scenarios" / "disaggregated.yaml"),
                 "--pd", "1:1,1:2,2:1,1:3,2:2,3:1", "--slo", "ttft_p99=1s,tpot_p99=25ms",
                 "--duration", "20", "--out", str(out), *RUN]) == 0
    line = _answer(capsys.readouterr().out)
    configs = pd.read_csv(out / "configs.csv")
    best = _best(out)
    assert best["config"].startswith("P:D ") and best["config"] in line and bool(best["meets_slo"])
    meets = configs[configs["meets_slo"].astype(bool)]
    assert best["cost_per_1m_tokens"] == pytest.approx(meets["cost_per_1m_tokens"].min())
    # the split matters, not only the count: another split of as many GPUs fails the SLO
    same = configs[(configs["num_gpus"] == best["num_gpus"]) & (configs["config"] != best["config"])]
    assert len(same) and not same["meets_slo"].astype(bool).all()


def test_d_a_2x_burst_for_60_s_peak_queue_and_time_to_recover(tmp_path, capsys):
    burst = [str(REPO / "scenarios" / "burst.yaml"), "--set", "workload.duration_s=200"]
    out = tmp_path / "d"
    assert main(["run", *burst, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())["summary"]
    [b] = s["bursts"]
    assert (b["factor"], b["start_s"], b["end_s"]) == (2, 120, 180)
    assert b["peak_queue"] > 5 * max(b["queue_before"], 1)  # the burst builds a queue ...
    assert b["time_to_recover_s"] is not None and 0 <= b["time_to_recover_s"] < 20  # ... that drains
    assert s["peak_queue"] == b["peak_queue"]
    assert "burst ×2 at 120–180 s" in text and "recovered" in text and "peak queue" in text
    assert s["cost_per_1m_tokens"] > 0 and "per 1M tokens with prompts" in text
    # on seeds: the peak queue and the time to recover with their intervals, and the cost per token
    out = tmp_path / "d-seeds"
    assert main(["run", *burst, "--seeds", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    figures = json.loads((out / "summary.json").read_text())["summary"]
    for name in ("burst_1_peak_queue", "burst_1_time_to_recover_s", "cost_per_1m_tokens"):
        f = figures[name]
        assert len(f["values"]) == 3 and f["lo"] <= f["mean"] <= f["hi"] and name in text
    assert figures["burst_1_peak_queue"]["values"][0] == b["peak_queue"]  # seed 0 is the run above


def test_e_h100_h200_a100_for_llama3_8b_cheapest_per_1m_tokens(tmp_path, capsys):
    out = tmp_path / "e"
    assert main(["plan", "--max-rate", "--model", "llama-3-8b", "--gpu", "H100,H200,A100",
                 "--slo", "ttft_p99=500ms,tpot_p99=50ms", "--bracket", "2,64", "--duration", "20",
                 "--out", str(out), *RUN]) == 0
    line = _answer(capsys.readouterr().out)
    configs = pd.read_csv(out / "configs.csv").set_index("hardware.gpu")
    assert set(configs.index) == {"H100", "H200", "A100"} and configs["max_rate"].notna().all()
    assert configs.loc["H200", "max_rate"] > configs.loc["A100", "max_rate"]  # more bandwidth, more rate
    best = _best(out)
    assert best["cost_per_1m_tokens"] == pytest.approx(configs["cost_per_1m_tokens"].min())
    assert f"gpu={best['hardware.gpu']}" in line and "per 1M tokens" in line and "at that rate" in line


@pytest.mark.parametrize("args, says", [
    (["--slo", "ttft_p99=1s"], "--rate"),
    (["--rate", "10", "--slo", "ttft_p99=fast"], "positive duration"),
    (["--rate", "10", "--slo", "speed=1s"], "not a latency"),
    (["--rate", "10", "--slo", "ttft_p99=1s,attainment=120%"], "share of requests"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--pd", "2:0"], "prefill:decode"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--pd", "1:1", "--replicas", "1-4"], "--pd already"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--tp", "0,2"], "positive whole numbers"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--replicas", "4-2"], "positive whole numbers"),
    (["--max-rate", "--rate", "10", "--bracket", "1,8", "--slo", "ttft_p99=1s"], "--bracket, not --rate"),
    (["--max-rate", "--bracket", "8,1", "--slo", "ttft_p99=1s"], "low < high"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--trace", "/no/such/trace.csv"], "no such trace file"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--scenario", "/no/such.yaml"], "no such scenario file"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--gpu", "H999", "--replicas", "1"], "H999"),
    (["--rate", "10", "--slo", "ttft_p99=1s", "--by", "max_rate"], "ranks by"),
    (["--max-rate", "--slo", "ttft_p99=1s,cost_per_1m_tokens=0.03"], "capacity search cannot bound it"),
    (["--rate", "10", "--slo", "cost_per_1m_tokens=cheap"], "expected a number"),
    (["--max-rate", "--slo", "ttft_p99=1s", "--by", "cost_per_hour"], "a --max-rate plan ranks by"),
])
def test_bad_arguments_are_refused_by_name_with_exit_2(tmp_path, capsys, args, says):
    assert main(["plan", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and says in err and "Traceback" not in err
    assert not (tmp_path / "out" / "runs.jsonl").exists()


def test_slo_and_replica_counts():
    slo = planner.parse_slo("ttft_p99=1s,tpot_p99=50ms,e2e=20s,attainment=95%")
    assert slo.limits == {"ttft_p99": 1.0, "tpot_p99": pytest.approx(0.05)}
    assert slo.per_request == {"ttft": 1.0, "tpot": pytest.approx(0.05), "e2e": 20.0}
    assert slo.target == pytest.approx(0.95)
    assert planner.replica_counts(6.92, 40, "found") == [5, 6, 7]
    assert planner.replica_counts(50, 40, "above_bracket") == [1]
    assert planner.replica_counts(None, 40, "below_bracket") == []
    assert planner.parse_ints("1-3,8", "--tp") == [1, 2, 3, 8]


def test_plan_replays_a_trace_at_the_rate_asked(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    rows = [f"2023-11-16 18:15:{i // 10:02d}.{i % 10}00000,{200 + 37 * i % 900},{20 + 13 * i % 200}"
            for i in range(120)]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    out = tmp_path / "t"
    assert main(["plan", "--trace", str(trace), "--rate", "4", "--replicas", "1,2", "--slo", "ttft_p99=1s",
                 "--requests", "60", "--seeds", "1", "--out", str(out), "--jobs", "1"]) == 0
    assert "meets the SLO at 4 req/s" in capsys.readouterr().out
    runs = pd.read_csv(out / "runs.csv")
    assert runs["offered_rate"].round().eq(4).all() and runs["requests"].eq(60).all()
    assert _best(out)["replicas"] == 1  # the cheaper of two that both meet a loose SLO


class _Run:
    def __init__(self, rows, best):
        self.outcome = type("O", (), {"configs": pd.DataFrame(rows), "best": best})()


def test_more_cases_brackets_the_fewest_replicas():
    def case(n, tp):
        return {"name": f"{n} × (tp={tp})", "set": {"hardware.tp": tp, "replicas": n}}

    cases = [case(7, 4), case(8, 4), case(4, 8)]
    rows = [{"config": c["name"], "meets_slo": ok, "cost_per_hour": cost, "verdict": v}
            for c, ok, cost, v in ((cases[0], True, 70.0, "meets"), (cases[1], True, 80.0, "meets"),
                                   (cases[2], False, 80.0, "fails"))]
    more = planner.more_cases(_Run(rows, rows[0]), cases)
    # 6 × TP 4 has not run (the answer's neighbour); 5 × TP 8 would cost 100 $/h, more than the answer
    assert more == [case(6, 4)]
    rows.append({"config": "6 × (tp=4)", "meets_slo": False, "cost_per_hour": 60.0, "verdict": "fails"})
    assert planner.more_cases(_Run(rows, rows[0]), [*cases, case(6, 4)]) == []


def test_a_cost_bound_in_the_slo_judges_each_configuration(tmp_path, capsys):
    def plan(bound: str) -> dict:
        out = tmp_path / bound
        main(["plan", "--rate", "6", "--replicas", "1", "--slo", f"ttft_p99=1s,cost_per_1m_tokens={bound}",
              "--requests", "60", "--seeds", "1", "--out", str(out), "--jobs", "1"])
        return pd.read_csv(out / "configs.csv").iloc[0].to_dict()

    loose, tight = plan("1"), plan("0.001")
    assert loose["verdict"] == "meets" and loose["cost_per_1m_tokens"] < 1
    assert tight["verdict"] == "fails" and "cost_per_1m_tokens" in tight["why"]
    assert "no configuration tried meets the SLO" in capsys.readouterr().out
