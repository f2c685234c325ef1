"""Hostile or broken servers (issue 33): every fault is recorded on its request, the run goes
on and is written whole; calibrate and validate refuse to fit or score on failed requests and
say what the server did. The fake server's faults are deterministic (every n-th request, or
every request); stalls never end by themselves, so only configured timeouts end them."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from endpoint.calibrate import fit_measurements, probe_design
from endpoint.failures import describe, failure_counts, kind_of
from endpoint.loadgen import Request, emits_token
from endpoint.probes import GapPoint, ProbeData, TtftPoint
from endpoint.records import itl_frame, requests_frame, write_run
from endpoint.server_info import from_answers, identity
from sim.cli.app import main
from sim.errors import InputError
from sim.pricing.profile import Device, LinearFit, Ops, Profile, Table, save_profile
from tests.endpoint.fake_server import FakeServer, Faults
from tests.endpoint.virtual_time import run_on_fake


def reqs(n, prompt=20, out=6, arrival=0.0):
    return [Request(i, arrival, list(range(100, 100 + prompt)), prompt, out) for i in range(n)]


@pytest.fixture()
def server(tokenizer_json):
    """A fake server whose faults a test sets (``server.fault(mode, every)``)."""
    s = FakeServer(root=str(tokenizer_json.parent))
    with s as url:
        s.url = url
        yield s


STREAM_FAULTS = {"null": "malformed event", "string": "malformed event", "not-json": "malformed event",
                 "bad-usage": "malformed event", "no-done": "ended early", "http-500": "HTTP",
                 "disconnect": "connection", "error-event": "server error"}


@pytest.mark.parametrize("mode", list(STREAM_FAULTS))
def test_each_fault_is_recorded_on_its_request_and_the_run_goes_on(monkeypatch, mode, tmp_path):
    res = run_on_fake(monkeypatch, reqs(6), faults=Faults(mode, every=2))
    bad = [r for r in res.records if r.error]
    assert len(bad) == 3 and all(kind_of(r.error) == STREAM_FAULTS[mode] for r in bad), [r.error for r in bad]
    good = [r for r in res.records if not r.error]
    assert len(good) == 3 and all(r.output_tokens == 6 and r.chunks == 6 for r in good)
    df = requests_frame(res)
    assert (df["status"] == "rejected").sum() == 3 and (df["reject_reason"] == STREAM_FAULTS[mode]).sum() == 3
    paths = write_run(tmp_path, res, df, itl_frame(res), {})
    assert len(pd.read_parquet(paths["requests"])) == 6
    summary = json.loads(paths["summary"].read_text())
    assert summary["failures"]["failed"] == 3 and summary["failures"]["reasons"] == {STREAM_FAULTS[mode]: 3}


def test_the_messages_say_what_the_server_sent(monkeypatch):
    for mode, words in (("null", "data: null is not a JSON object"), ("string", 'data: "x" is not a JSON object'),
                        ("bad-usage", 'usage.completion_tokens is "many"'),
                        ("no-done", "without [DONE] after 3 token(s)"), ("http-500", "HTTP 500"),
                        ("disconnect", "cut mid-stream after 1 token(s)"),
                        ("error-event", 'server error: {"code": 500, "message": "slot unavailable"}')):
        err = run_on_fake(monkeypatch, reqs(1), faults=Faults(mode)).records[0].error
        assert words in err, (mode, err)


def test_a_stall_ends_at_the_request_timeout_with_a_message(monkeypatch):
    """On the fake's virtual clock (``virtual_time``): the first token comes at once, then
    nothing until the timeout, whatever the machine's load."""
    res = run_on_fake(monkeypatch, reqs(3), faults=Faults("stall"), options={"timeout_s": 0.3})
    for r in res.records:
        assert r.error == "timeout: the stream stalled after 1 token(s): the request timeout of 0.3 s ran out"
        assert r.chunks == 1 and r.done


def test_the_time_limit_cancels_what_is_in_flight_and_what_was_never_sent(monkeypatch):
    late = reqs(2, arrival=3600.0)  # far beyond the limit: never sent
    res = run_on_fake(monkeypatch, reqs(2) + [Request(2 + r.request_id, r.arrival, r.prompt, r.prompt_len,
                                                      r.max_tokens) for r in late],
                      faults=Faults("stall"), time_limit_s=0.3)
    assert res.duration_s == pytest.approx(0.3, abs=1e-9)  # virtual time: stopped at the limit
    errs = [r.error for r in res.records]
    assert errs[:2] == ["time limit: cancelled after 1 token(s): the run's time limit of 0.3 s was reached"] * 2
    assert errs[2:] == ["time limit: not sent: the run's time limit of 0.3 s was reached first"] * 2
    assert len(requests_frame(res)) == 4


@pytest.mark.parametrize("mode", ["close-reused", "close-after"])
def test_a_closed_kept_alive_connection_loses_no_request(monkeypatch, mode):
    """The server drops every request that comes on a kept-alive connection without an answer
    (close-reused), or closes each connection right after its answer, as llama.cpp's server
    does at its keep-alive limits (close-after: the client's next write on it fails, ``Can not
    write request body``): each such request is sent again once on a new connection."""
    res = run_on_fake(monkeypatch, reqs(12), faults=Faults(mode), closed=3)
    assert all(not r.error and r.output_tokens == 6 for r in res.records), [r.error for r in res.records]
    if mode == "close-reused":  # every reuse fails (close-after: when the client had not seen the close)
        assert sum(r.retries for r in res.records) >= 1
    assert all(r.retries <= 1 for r in res.records)


def test_an_empty_closing_chunk_is_not_a_token(monkeypatch):
    res = run_on_fake(monkeypatch, reqs(3), faults=Faults("empty-final"))
    for r in res.records:
        assert not r.error and r.chunks == 6 and len(r.gaps) == 5
    assert (requests_frame(res)["output_tokens"] == 6).all()


def test_which_chunks_carry_a_token():
    assert emits_token([{"text": " a", "finish_reason": None}])
    assert emits_token([{"text": " a", "finish_reason": "length"}])  # vLLM's last token
    assert emits_token([{"text": "", "finish_reason": None}])  # a special token mid-stream
    assert not emits_token([{"text": "", "finish_reason": "length"}])  # llama.cpp's closing chunk
    assert not emits_token([{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    assert emits_token([{"delta": {"content": "x"}, "finish_reason": None}])
    assert not emits_token([{"delta": {}, "finish_reason": "stop"}])


def test_what_the_server_publishes_is_checked(server, tmp_path, capsys):
    server.faults.models = {"data": None}
    assert identity(server.url)["models"] == []
    server.faults.models = {"data": [{"id": "fake", "root": server.root, "max_model_len": "lots"}]}
    assert calibrate(server, tmp_path) == 2
    assert ("the server publishes /v1/models max_model_len = 'lots', not a positive whole number"
            in capsys.readouterr().err)
    assert from_answers("u", {"/props": {"total_slots": 2048.0}}).max_seqs == 2048
    for bad in (0, -1, 1.5, "x", [1], True):
        info = from_answers("u", {"/props": {"total_slots": bad}})
        assert info.max_seqs is None and info.problems == [
            f"the server publishes /props total_slots = {bad!r}, not a positive whole number"]


def test_a_retry_goes_out_on_a_new_connection(monkeypatch):
    """Three requests at once leave three kept-alive connections idle; the fourth, later, goes
    out on one of them, which the server closed: its retry must not take another of the
    pool's (the server closed those too, as llama.cpp's does at its keep-alive limits)."""
    late = [Request(3, 5.0, list(range(100, 120)), 20, 6)]
    res = run_on_fake(monkeypatch, reqs(3) + late, faults=Faults("close-reused"))
    assert [r.error for r in res.records] == [""] * 4
    assert res.records[3].retries == 1 and res.records[3].output_tokens == 6


def test_failures_are_counted_by_kind():
    errs = ["", "HTTP 500: x", "timeout: a", "timeout: b", ""]
    c = failure_counts(errs)
    assert c["failed"] == 3 and c["reasons"] == {"timeout": 2, "HTTP": 1}
    assert describe(errs, 5) == "3 of 5 request(s) failed: 2 timeout (e.g. timeout: a); 1 HTTP (e.g. HTTP 500: x)"


# -- the commands ------------------------------------------------------------------------------
def cli(*argv):
    return main([str(a) for a in argv])


def scenario(tmp_path, n=6, **workload):
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny-llama-12m", "name": "faults", "scheduler": {
        "policy": "chunked-prefill", "chunk_size": 128, "max_num_seqs": 6}, "workload": {
        "num_requests": n, "arrival": {"process": "closed", "concurrency": 2},
        "prompt_len": {"dist": "fixed", "value": 20}, "output_len": {"dist": "fixed", "value": 6}, **workload}}))
    return path


def test_loadgen_writes_every_request_and_says_how_many_failed(server, tmp_path, capsys):
    server.fault("null", every=2)
    out = tmp_path / "out"
    assert cli("loadgen", scenario(tmp_path), "--endpoint", server.url, "--out", out, "--no-progress") == 1
    text = capsys.readouterr().out
    assert "3 of 6 request(s) failed: 3 malformed event" in " ".join(text.split())
    df = pd.read_parquet(out / "requests.parquet")
    assert len(df) == 6 and (df["error"] != "").sum() == 3
    assert json.loads((out / "summary.json").read_text())["failures"]["reasons"] == {"malformed event": 3}


def test_loadgen_that_measured_nothing_writes_it_and_says_why(server, tmp_path, capsys):
    server.fault("http-500")
    out = tmp_path / "out"
    assert cli("loadgen", scenario(tmp_path), "--endpoint", server.url, "--out", out, "--no-progress") == 1
    assert "no request finished" in capsys.readouterr().out
    df = pd.read_parquet(out / "requests.parquet")
    assert len(df) == 6 and df["error"].str.startswith("HTTP 500").all()


def test_loadgen_limits_are_checked(server, tmp_path, capsys):
    assert cli("loadgen", "--endpoint", server.url, "--request-timeout", "0", "--out", tmp_path) == 2
    assert "--request-timeout" in capsys.readouterr().err


def calibrate(server, tmp_path, *extra):
    return cli("calibrate", "--endpoint", server.url, "--quick", "--model", "tiny-llama-12m",
               "--out", tmp_path / "prof.json", "--no-progress", *extra)


def test_calibrate_refuses_a_failing_server_and_keeps_what_it_measured(server, tmp_path, capsys):
    server.fault("http-500")
    assert calibrate(server, tmp_path) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "calibration probe" in err and "HTTP 500" in err and "no profile written" in err
    assert not (tmp_path / "prof.json").exists()
    assert json.loads((tmp_path / "prof.partial.json").read_text())["ttft"] == []


def test_calibrate_refuses_a_stream_that_ends_early(server, tmp_path, capsys):
    server.fault("no-done", every=3)  # the warm-up's third request
    assert calibrate(server, tmp_path) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "ended early" in err and "without [DONE]" in err
    assert "warm-up" in json.loads((tmp_path / "prof.partial.json").read_text())["phases_s"]


def test_calibrate_stall_ends_at_the_request_timeout(server, tmp_path, capsys):
    """``--request-timeout`` reaches the probes (real time here: whether the stalled request's
    first token came before the timeout is the machine's; the message's wording is checked on
    virtual time above)."""
    server.fault("stall")
    assert calibrate(server, tmp_path, "--request-timeout", "0.3") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "calibration probe" in err and "1 timeout (e.g. timeout: " in err
    assert "the request timeout of 0.3 s ran out" in err


def test_calibrate_stops_at_its_time_limit(server, tmp_path, capsys):
    server.fault("stall")
    assert calibrate(server, tmp_path, "--time-limit", "0.3") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "calibration did not finish within 0.3 s (stopped during 'warm-up')" in err


def test_the_fit_refuses_unusable_measurements():
    data = ProbeData(ttft=[TtftPoint(16, 0.01, 1), TtftPoint(64, float("nan"), 1)])
    with pytest.raises(InputError, match="not positive times"):
        fit_measurements(data, 128, "http://x")
    data = ProbeData(ttft=[TtftPoint(16, 0.01, 1)], gaps=[GapPoint("mixed", 1, 40.0, 32, 0.02)])
    with pytest.raises(InputError, match="no decode probe"):
        fit_measurements(data, 128, "http://x")


def endpoint_profile(tmp_path):
    step = LinearFit(features=["const", "num_tokens", "num_seqs"], coef=[0.006, 1e-4, 1e-3], r2=1.0)
    p = Profile(schema_version=1, source="endpoint", created="now", device=Device(name="t", type="cpu"),
                model="tiny-llama-12m", model_shape={}, dtype="fp32", ops=Ops(linear=Table(x=[1, 2], seconds=[0, 0])),
                step=step, prefer="step", request_overhead_s=0.004,
                grid={"probe_s": 0.5, "probe_design": probe_design(), "scheduler": {}})
    return save_profile(p, tmp_path / "prof.json")


def validate(server, tmp_path, *extra):
    return cli("validate", scenario(tmp_path), "--endpoint", server.url, "--profile", endpoint_profile(tmp_path),
               "--out", tmp_path / "v", *extra)


def test_validate_against_a_server_that_fails_everything_says_so(server, tmp_path, capsys):
    server.fault("http-500")
    assert validate(server, tmp_path) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "validation probe (speed probe, lone requests)" in err and "HTTP 500" in err
    assert "finite number" not in err


def test_validate_refuses_to_score_a_run_with_failed_requests(server, tmp_path, capsys):
    stale = tmp_path / "v"
    for old in ("validation.json", "steps.csv", "run2/requests.parquet"):  # an older validation's, 2 runs
        (stale / old).parent.mkdir(parents=True, exist_ok=True)
        (stale / old).write_text("{}")
    server.fault("no-done", every=12)  # the speed probe sends 11: the run's first request ends early
    assert validate(server, tmp_path) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "validation run 1: 1 of 6 request(s) failed: 1 ended early" in err and "not scored" in err
    df = pd.read_parquet(tmp_path / "v" / "run1" / "requests.parquet")
    assert len(df) == 6 and (df["error"] != "").sum() == 1
    assert not [p.name for p in (tmp_path / "v").iterdir() if p.name != "run1"]


def test_validate_stops_at_its_time_limit(server, tmp_path, capsys):
    server.fault("stall")
    assert validate(server, tmp_path, "--time-limit", "0.3") == 2
    assert "validation did not finish within 0.3 s" in " ".join(capsys.readouterr().err.split())
