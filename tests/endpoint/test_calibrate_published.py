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
