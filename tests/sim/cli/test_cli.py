"""The command line: the README's run command, catalog listings, overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd

from sim.cli.app import main


def test_readme_run_command_writes_the_result_files(tmp_path):
    # The README's command runs `servesim run` on the embedded default scenario.
    env = {**os.environ, "COLUMNS": "120"}
    p = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--out", str(tmp_path / "r"),
                        "--set", "workload.num_requests=300"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "r"
    for name in ("requests.parquet", "steps.parquet", "summary.json", "report.html", "plotly.min.js"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["finished"] == 300
    req = pd.read_parquet(out / "requests.parquet")
    assert {"ttft", "tpot", "e2e", "queueing_delay", "preemptions", "slo_met"} <= set(req.columns)
    html = (out / "report.html").read_text()
    assert "<script src='plotly.min.js'" in html and "TTFT" in html
    lines = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines() if line.strip()}
    assert len(lines["TTFT"]) == 4  # mean, p50, p90, p99 in ms
    assert "SLO attainment" in p.stdout


def test_csv_output_and_overrides(tmp_path, capsys):
    code = main(["run", "--out", str(tmp_path), "--format", "csv", "--set",
                 "workload.num_requests=50", "--set", "scheduler.policy=chunked-prefill"])
    assert code == 0
    req = pd.read_csv(tmp_path / "requests.csv")
    assert len(req) == 50
    cfg = json.loads((tmp_path / "summary.json").read_text())["config"]
    assert cfg["scheduler"]["policy"] == "chunked-prefill"


def test_list_catalogs(capsys):
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    for name in ("llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-7b",
                 "tiny-llama"):
        assert name in out
    assert main(["list", "gpus"]) == 0
    out = capsys.readouterr().out
    for name in ("A100-40GB", "A100-80GB", "H100-SXM", "H200", "L40S", "B200"):
        assert name in out


def test_model_from_hf_config(tmp_path, capsys):
    cfg = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
           "num_hidden_layers": 4, "intermediate_size": 1024, "vocab_size": 1000,
           "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "s.yaml").write_text(
        "model: {hf_config: m, name: mine}\nworkload: {num_requests: 20}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")]) == 0
    from sim.scenario.specs import model_from_hf_config

    spec = model_from_hf_config(tmp_path / "m")
    assert spec.num_kv_heads == 2 and spec.head_dim == 64 and spec.dtype == "bf16"


def test_the_simulator_cli_never_imports_torch():
    # `pip install -e .` (no engine extra) must still run `servesim run`: building the CLI,
    # with every command registered, and simulating import no torch.
    code = ("import sys; from sim.cli.app import build_parser, main; build_parser(); "
            "main(['list', 'gpus']); assert 'torch' not in sys.modules, 'torch was imported'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_a_run_imports_neither_the_other_commands_nor_plotlys_figures(tmp_path):
    # servesim run builds only its own commands (the study, engine, calibration and endpoint
    # ones import far more than a run needs) and draws its report without plotly's objects
    unwanted = ("sim.study.cli", "endpoint.cli", "calibration.cli", "engine.cli", "plotly.graph_objects")
    code = (f"import sys; from sim.cli.app import main; main(['run', '--out', {str(tmp_path)!r}, '--set', "
            f"'workload.num_requests=20']); extra = [m for m in {unwanted!r} if m in sys.modules]; "
            "assert not extra, extra")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_start_up_freezes_what_the_imports_left_and_collects_again_after(tmp_path):
    # sim/cli/startup.py: no collection while importing; then the imports' objects are frozen and
    # the collector is back on, for a run, a failing run and any other command alike
    code = ("import gc, sys; from sim.cli.app import main; "
            f"main(['run', '--out', {str(tmp_path / 'a')!r}, '--set', 'workload.num_requests=20']); "
            "n = gc.get_freeze_count(); assert gc.isenabled() and n > 100_000, n; "
            f"assert main(['run', '--out', {str(tmp_path / 'b')!r}, '--set', 'workload.bogus=1']) == 2; "
            "assert gc.isenabled() and gc.get_freeze_count() <= n; "  # frozen once per process
            "main(['list', 'gpus']); assert gc.isenabled()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_error_messages_keep_square_brackets(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(
        "workload:\n  classes:\n    - {name: a, num_requests: 5}\n    - {name: b, num_requests: 5, bogus: 1}\n")
    assert main(["run", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "workload.classes[1].bogus" in err  # rich would eat "[1]" as markup if unescaped


def test_bench_measures_both_loops_and_their_ratio():
    p = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "--requests", "300", "--policies", "continuous",
                        "--loop", "both"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    assert "compiled over SimPy" in p.stdout and "default continuous" in p.stdout


def test_bench_scenarios_as_json_checks_each_against_the_target():
    import json

    p = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "--requests", "300", "--format", "json",
                        "--scenarios", "scenarios/quickstart.yaml", "scenarios/policy-static.yaml"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout)["runs"]
    assert [r["name"] for r in runs] == ["quickstart", "policy-static"]
    assert all(r["requests"] == 300 and r["loop"] == "compiled" and isinstance(r["meets_20k"], bool) for r in runs)


def test_bench_scale_runs_requests_over_replicas_and_compares_their_peaks():
    import json

    p = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "--requests", "100", "--policies", "continuous",
                        "--format", "json", "--scale", "200", "400", "--replicas", "2", "4"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    scaled = [r for r in out["runs"] if "over" in r["name"]]
    assert [(r["name"], r["requests"]) for r in scaled] == [("200 over 2 replicas", 200), ("400 over 4 replicas", 400)]
    assert isinstance(out["peak_ratio_400_over_200"], float)
    assert isinstance(out["400_over_4_replicas_under_60_s_and_2048_mb"], bool)


def test_bench_scale_refuses_replicas_that_do_not_pair_with_its_runs():
    p = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "--scale", "200", "400", "--replicas", "1", "2", "3"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 2 and "--replicas" in p.stderr


def test_bench_prices_with_the_shipped_profile():
    p = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "--requests", "200", "--cost", "profile",
                        "--policies", "chunked-prefill"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr


