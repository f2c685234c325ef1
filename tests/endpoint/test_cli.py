"""The endpoint commands' bad-input handling against the fake server. (Calibrating and
validating the fake end to end, in real time, is ``benchmarks/quick_checks.py --only endpoint``.)"""


import yaml

from sim.cli.app import main


def run_cli(*argv):
    return main([str(a) for a in argv])


def test_bad_endpoint_url_and_server_exit_2(tmp_path, capsys):
    assert run_cli("loadgen", "--endpoint", "not a url", "--out", tmp_path) == 2
    assert "--endpoint" in capsys.readouterr().err
    assert run_cli("loadgen", "--endpoint", "http://127.0.0.1:9", "--out", tmp_path) == 2
    assert "no OpenAI-compatible server" in capsys.readouterr().err
    assert run_cli("calibrate", "--endpoint", "ftp://x", "--out", tmp_path / "p.json") == 2
    assert run_cli("calibrate", "--endpoint", "http://127.0.0.1:9", "--time-budget", "-1",
                   "--out", tmp_path / "p.json") == 2
    assert "--time-budget" in capsys.readouterr().err
    assert run_cli("validate", "--endpoint", "http://127.0.0.1:9", "--profile", tmp_path / "none.json") == 2


def test_bad_model_profile_and_scenario_exit_2(fake_server, tmp_path, capsys):
    assert run_cli("loadgen", "--endpoint", fake_server, "--model", "nope", "--out", tmp_path) == 2
    assert "serves fake" in capsys.readouterr().err
    assert run_cli("validate", "--endpoint", fake_server, "--profile", tmp_path / "missing.json") == 2
    assert "profile file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {arrival: {process: closed, concurrency: 0}}\n")
    assert run_cli("loadgen", bad, "--endpoint", fake_server, "--out", tmp_path) == 2
    assert "concurrency" in capsys.readouterr().err
    long = tmp_path / "long.yaml"
    long.write_text(yaml.safe_dump({"model": "tiny-llama-12m", "workload": {
        "num_requests": 2, "prompt_len": {"dist": "fixed", "value": 2000}}}))
    assert run_cli("loadgen", long, "--endpoint", fake_server, "--out", tmp_path) == 2
    assert "max_model_len" in capsys.readouterr().err


def test_calibrate_endpoint_writes_the_profile_and_its_scheduler(fake_server, tmp_path, monkeypatch, capsys):
    """The door of ``calibrate --endpoint``: the output is checked before anything is measured,
    then the profile (with its saturation check) and the inferred scheduler are written. The
    probing itself is stubbed here (it runs in real time: ``benchmarks/quick_checks.py``)."""
    from types import SimpleNamespace

    import yaml

    from sim.pricing.profile import load_profile
    from tests.endpoint.test_validate_known_server import known_profile

    profile = load_profile(known_profile(tmp_path / "known.json"))
    profile = profile.model_copy(update={"grid": {**profile.grid, "fit": {"step": {
        "n": 40, "median_abs_rel_error": 0.01}}}})
    fragment = {"model": "tiny-llama-12m", "scheduler": {"policy": "chunked-prefill", "chunk_size": 128,
                                                          "max_num_seqs": 6, "block_size": 16},
                "hardware": {"kv_blocks": 4096}, "cost": {"model": "profile", "profile": "profile.json"}}
    calls = []

    def calibrate(settings, vocab, data=None):
        calls.append(settings)
        return profile, fragment, SimpleNamespace(phases_s={"total": 1.0})

    def saturation_check(path, frag, data, folder):
        assert load_profile(path).request_overhead_s == profile.request_overhead_s  # written before
        return {"concurrency": 4, "measured_req_per_s": 2.0, "simulated_req_per_s": 2.1, "rel_diff": 0.05}

    monkeypatch.setattr("endpoint.calibrate.calibrate", calibrate)
    monkeypatch.setattr("endpoint.calibrate.saturation_check", saturation_check)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert run_cli("calibrate", "--endpoint", fake_server, "--model", "tiny-llama-12m", "--out", folder) == 2
    assert "--out" in capsys.readouterr().err and not calls  # refused before measuring
    out = tmp_path / "p.json"
    assert run_cli("calibrate", "--endpoint", fake_server, "--model", "tiny-llama-12m", "--out", out,
                   "--no-progress") == 0
    assert calls[0].model == "fake" and calls[0].sim_model == "tiny-llama-12m"
    p = load_profile(out)
    assert p.grid["fit"]["saturation"]["rel_diff"] == 0.05 and p.grid["phases_s"] == {"total": 1.0}
    frag = yaml.safe_load(out.with_suffix(".scenario.yaml").read_text())
    assert frag["scheduler"]["chunk_size"] == 128 and frag["cost"]["profile"] == "p.json"
    assert not list(tmp_path.glob(".*")) and not list(tmp_path.glob("*.unchecked.json"))  # no temporary files
    assert "saturation (closed loop of 4)" in capsys.readouterr().out

    # a profile whose saturation check misses by more than 5% is not written, unless forced
    def off_check(path, frag, data, folder):
        return {"concurrency": 4, "measured_req_per_s": 2.0, "simulated_req_per_s": 2.3, "rel_diff": 0.15,
                "ttft_measured_s": 0.2, "ttft_simulated_s": 0.21, "tpot_measured_s": 0.05, "tpot_simulated_s": 0.04}

    monkeypatch.setattr("endpoint.calibrate.saturation_check", off_check)
    monkeypatch.setattr("endpoint.calibrate.keep_partial", lambda data, path: path.with_suffix(".partial.json"))
    off = tmp_path / "off.json"
    assert run_cli("calibrate", "--endpoint", fake_server, "--model", "tiny-llama-12m", "--out", off,
                   "--no-progress") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "misses by +15.0%" in err and "most off: time per output token (decode steps): simulated 40.0 ms, " \
        "measured 50.0 ms" in err and "--force" in err
    assert not off.exists() and not off.with_suffix(".scenario.yaml").exists()
    assert not list(tmp_path.glob("*.unchecked.json"))
    assert run_cli("calibrate", "--endpoint", fake_server, "--model", "tiny-llama-12m", "--out", off,
                   "--no-progress", "--force") == 0
    assert any(n.startswith("written with --force: the profile's saturation check misses by +15.0%")
               for n in load_profile(off).notes)
