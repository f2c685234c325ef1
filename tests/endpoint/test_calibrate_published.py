"""Calibration reads what the server publishes and keeps to it: against a llama.cpp server (the
fake, in llama.cpp's shape) with 4 slots of 512 tokens, no probe is longer than a slot, the
slots are taken as published (no probe of the sequence limit), and the profile and scenario say
fixed slots. The requests themselves are answered by a stand-in with a known step cost (no
real time), so only what calibration sends and concludes is under test."""

from __future__ import annotations

import numpy as np
import pytest

from endpoint.calibrate import Settings, calibrate
from endpoint.loadgen import LoadResult, Record
from endpoint.replay import load_vocab
from sim.errors import InputError
from sim.scenario.load import scenario_from_dict
from tests.endpoint.fake_server import Cost, FakeServer

CTX, SLOTS = 512, 4


class StandIn:
    """Answers every request at once with a known schedule (``prompt`` tokens prefilled in
    ``c0 + c_tok·prompt``, then decode gaps of ``c0 + c_seq·batch``); keeps what was sent."""

    def __init__(self, context: int):
        self.context, self.sent = context, []

    async def run_async(self, reqs, opts, records=None, on_start=None, time_limit_s=None, closed=None,
                        on_done=None, **kw):
        if on_start is not None:
            on_start(1.7e9)
        out = []
        for r in reqs:
            self.sent.append(r.prompt_len + r.max_tokens)
            rec = Record(r.request_id, r.arrival, r.prompt_len, r.max_tokens, sent=r.arrival)
            if r.prompt_len + r.max_tokens > self.context:
                rec.error = "HTTP 400: the request exceeds the available context size"
            else:
                rec.first_token = r.arrival + 0.01 + 2e-5 * r.prompt_len
                rec.gaps = [0.004 + 0.0005 * len(reqs)] * (r.max_tokens - 1)
                rec.last_token = rec.first_token + sum(rec.gaps)
                rec.chunks, rec.output_tokens, rec.prompt_tokens = r.max_tokens, r.max_tokens, r.prompt_len
            rec.done = True
            out.append(rec)
            if records is not None:
                records.append(rec)
            if on_done is not None:
                on_done(rec)
        end = max((x.last_token for x in out if x.last_token == x.last_token), default=0.0)
        return LoadResult(out, 1.7e9, float(end), {}, "closed" if closed else "open")


@pytest.fixture()
def llama_cpp(tokenizer_json, monkeypatch):
    stand_in = StandIn(CTX)
    monkeypatch.setattr("endpoint.probes.run_async", stand_in.run_async)
    monkeypatch.setattr("endpoint.probes.scrape", lambda url: None)  # no live gauges to poll
    with FakeServer(Cost(max_seqs=SLOTS, n_ctx=CTX), root=str(tokenizer_json.parent), flavor="llama.cpp") as url:
        yield url, stand_in, tokenizer_json


def test_calibration_keeps_to_the_slots_the_server_publishes(llama_cpp):
    url, stand_in, tok = llama_cpp
    s = Settings(url=url, model="fake", sim_model="tiny-llama-12m", quick=True, progress=False)
    profile, fragment, data = calibrate(s, load_vocab(url, str(tok)), log=lambda *a: None)
    assert stand_in.sent and max(stand_in.sent) <= CTX  # no probe a slot must refuse
    assert data.max_seqs_sent == 0 and data.max_running is None  # the slots were published, not probed
    assert fragment["engine"] == "llama.cpp"
    sched = fragment["scheduler"]
    assert (sched["policy"], sched["max_num_seqs"], sched["slot_context"]) == ("slots", SLOTS, CTX)
    server = profile.grid["server"]
    assert server["engine"] == "llama.cpp" and server["sources"]["max_seqs"] == "/props total_slots"
    assert any("max running sequences 4: published (/props total_slots)" in n for n in profile.notes)
    sc = scenario_from_dict({**fragment, "cost": {"model": "roofline"}, "workload": {"num_requests": 4}}, "<frag>")
    assert sc.scheduler.policy == "slots" and sc.memory.num_blocks == SLOTS * -(-CTX // 16)
    assert np.isfinite(profile.request_overhead_s)


def test_a_context_too_small_for_the_probes_is_refused_before_any_probe(tokenizer_json, monkeypatch):
    stand_in = StandIn(256)
    monkeypatch.setattr("endpoint.probes.run_async", stand_in.run_async)
    with FakeServer(Cost(max_seqs=2, n_ctx=256), root=str(tokenizer_json.parent), flavor="llama.cpp") as url:
        s = Settings(url=url, model="fake", sim_model="tiny-llama-12m", quick=True, progress=False)
        with pytest.raises(InputError, match=r"gives one sequence 256 tokens \(/props default_generation"):
            calibrate(s, load_vocab(url, str(tokenizer_json)), log=lambda *a: None)
    assert stand_in.sent == []


def test_mixed_steps_are_probed_up_to_the_fullest_one_the_slots_allow(llama_cpp, monkeypatch):
    """A prompt among b decodes needs b + 1 slots: with 4 slots the probes reach 3 decodes and a
    prompt (the fullest mixed step validation meets), not one decode only."""
    from endpoint.probes import Prober

    url, _, tok = llama_cpp
    batches = []
    real = Prober.mixed

    def mixed(self, batch, context, prompt, out_tokens):
        batches.append(batch)
        return real(self, batch, context, prompt, out_tokens)

    monkeypatch.setattr(Prober, "mixed", mixed)
    s = Settings(url=url, model="fake", sim_model="tiny-llama-12m", quick=False, progress=False)
    calibrate(s, load_vocab(url, str(tok)), log=lambda *a: None)
    assert sorted(set(batches)) == [1, SLOTS - 1]


def test_saturation_seconds_from_the_probes_by_hand():
    from endpoint.calibrate import saturation_seconds
    from endpoint.probes import GapPoint, ProbeData, TtftPoint

    data = ProbeData(ttft=[TtftPoint(128, 0.1, None), TtftPoint(384, 0.3, None)],
                     gaps=[GapPoint("decode", 2, 64.0, 0, 0.02), GapPoint("decode", 4, 128.0, 0, 0.03),
                           GapPoint("mixed", 4, 128.0, 64, 0.5)])
    # 256-token prompts: 0.2 s each (interpolated); 64 outputs at the batch of 4: 0.03 s a step
    assert saturation_seconds(data, 4, 40) == pytest.approx(40 / 4 * (4 * 0.2 + 64 * 0.03))
    assert saturation_seconds(ProbeData(), 4, 40) == 0.0  # nothing measured yet: no estimate


@pytest.mark.parametrize("budget", [None, 1e-9])
def test_a_time_budget_cuts_rounds_and_the_saturation_loop_and_says_so(llama_cpp, budget):
    """Rounds after the first are dropped, and the saturation loop shrinks to two waves, when the
    time spent and what is left would overrun the budget (here: any time at all)."""
    from endpoint.calibrate import grid

    url, _, tok = llama_cpp
    s = Settings(url=url, model="fake", sim_model="tiny-llama-12m", quick=False, progress=False, time_budget=budget)
    _, _, data = calibrate(s, load_vocab(url, str(tok)), log=lambda *a: None)
    g = grid(s, CTX)
    rounds = len(data.ttft) // len(g["ttft_prompts"])
    if budget is None:
        assert rounds == g["rounds"] and data.saturation["requests"] == g["saturation_requests"]
        assert not any("time budget" in n for n in s.notes)
    else:
        assert rounds == 1 and data.saturation["requests"] == 2 * SLOTS
        assert any(n.startswith(f"time budget 1e-09 s: 1 of {g['rounds']} rounds") for n in s.notes)
        assert any(f"saturation loop ran {2 * SLOTS} of {g['saturation_requests']}" in n for n in s.notes)


@pytest.mark.parametrize("context", [1024, 2048, 4096, 8192])
def test_the_grid_reaches_the_longest_context_the_server_gives(context):
    """Validation meets prompts and decodes up to the context: the full grid probes them there
    (a 4,096-token server's long prompts were priced by extrapolation before), and never beyond."""
    from endpoint.calibrate import grid

    g = grid(Settings(url="x", model="m", sim_model="tiny-llama-12m"), context)
    cap = context - 8
    assert max(g["ttft_prompts"]) <= cap
    longest = max(c for _, c in g["decode_points"] if c + g["decode_tokens"] < context)
    assert max(g["ttft_prompts"]) >= 0.9 * cap and longest >= context - 64


@pytest.mark.parametrize("kv_blocks", [24, 4096])
def test_a_sequence_limit_the_kv_cache_may_have_set_is_stated_as_a_bound(tokenizer_json, monkeypatch, kv_blocks):
    """vLLM publishes its KV cache, not its sequence limit: the probe's 64 requests (16 + 48 tokens,
    4 blocks of 16 each) plateau at 6 running. With 24 blocks (23 a request may hold: one is vLLM's
    null block) that is the cache full, so the limit is only known to be at least 6 (and the cache
    binds before any limit above 23); with 4,096 blocks 6 is the limit."""
    from endpoint.probes import Prober

    stand_in = StandIn(1024)
    monkeypatch.setattr("endpoint.probes.run_async", stand_in.run_async)
    monkeypatch.setattr("endpoint.probes.scrape", lambda url: None)
    monkeypatch.setattr(Prober, "max_seqs", lambda self, n, prompt=16, out_tokens=48: 6.0)
    with FakeServer(Cost(max_seqs=6, kv_blocks=kv_blocks, n_ctx=1024), root=str(tokenizer_json.parent)) as url:
        s = Settings(url=url, model="fake", sim_model="tiny-llama-12m", quick=True, progress=False)
        _, fragment, data = calibrate(s, load_vocab(url, str(tokenizer_json)), log=lambda *a: None)
    assert data.max_running == 6.0
    if kv_blocks == 24:
        assert fragment["scheduler"]["max_num_seqs"] == 23
        assert any(n.startswith("max running sequences ≥ 6: running requests plateaued there with 24 sent at "
                                "once, 4 KV block(s) each, when the cache's 23 blocks were full") for n in s.notes)
    else:
        assert fragment["scheduler"]["max_num_seqs"] == 6
        assert "max running sequences 6: running requests plateaued there with 24 sent at once" in s.notes


def test_decode_probes_fit_the_published_kv_cache():
    """A probe of b requests that cannot all hold their KV at once never decodes together (vLLM
    admits what fits): on a 4,096-token server with 64 blocks of 128 (qwen3-160m's), 16 prompts of
    512 were such a probe and gave no step in any round. Each point keeps to the cache instead,
    and the sequence limit is probed at the longest context that fits."""
    from endpoint.calibrate import decode_points, grid

    g = grid(Settings(url="x", model="m", sim_model="tiny-llama-12m"), 4096)
    pts = decode_points(g, 24, 4096, 128, 64)
    for b, c in pts:
        assert b * -(-(c + g["decode_tokens"]) // 128) <= 64, (b, c)
    assert (16, 479) in pts and (16, 512) not in pts  # 4 blocks each: 512 tokens, 32 of them decoded
    assert (24, 223) in pts  # the sequence limit at 2 blocks each
    assert max(c for _, c in pts) == 4040  # one request still reaches the context
    # no published cache: the grid as it is, within the sequence limit and the probes' token bound
    assert decode_points(g, 24, 4096, 128, None) == [
        (b, c) for b, c in [*g["decode_points"], (24, 512)] if b <= 24 and b * c <= g["budget_tokens"]]


def test_usable_blocks_leave_out_vllms_null_block():
    from endpoint.calibrate import usable_blocks
    from endpoint.server_info import ServerInfo

    vllm = ServerInfo("x", engine="vllm", kv_tokens=64 * 128)
    assert usable_blocks(vllm, 128) == 63  # qwen3-160m's 64 published blocks: 16 x 512 tokens never fit
    assert usable_blocks(ServerInfo("x", engine="sglang", kv_tokens=64 * 128), 128) == 64
    assert usable_blocks(ServerInfo("x", engine="vllm"), 128) is None
