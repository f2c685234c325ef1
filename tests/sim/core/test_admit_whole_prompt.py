"""vLLM V1's admission under chunked prefill (scheduler_reserve_full_isl, on in vLLM 0.32): a
waiting request joins only when its whole sequence so far fits the free KV blocks, though only
its first chunk is allocated. Without it, a prompt whose first chunk fits is admitted, grows
chunk by chunk into blocks the running request needs, and is preempted (the thrash vLLM's rule
was added against: vllm-project/vllm#37307)."""

from __future__ import annotations

import pytest

from sim.loops.run import simulate
from tests.sim.helpers import scenario


def two_long_prompts(admit_whole: bool, loop: str = "auto"):
    # 64 blocks of 16 tokens; two users at once, each 600 prompt tokens (38 blocks) and 400 out:
    # one alone peaks at 63 blocks
    return scenario(hardware={"kv_blocks": 64}, simulation={"loop": loop},
                    scheduler={"policy": "chunked-prefill", "chunk_size": 256, "max_num_seqs": 16,
                               "block_size": 16, "watermark": 0.0, "admit_whole_prompt": admit_whole},
                    workload={"num_requests": 2, "arrival": {"process": "closed", "concurrency": 2},
                              "prompt_len": {"dist": "fixed", "value": 600},
                              "output_len": {"dist": "fixed", "value": 400}})


@pytest.mark.parametrize("loop", ["compiled", "simpy"])
def test_the_second_prompt_waits_for_room_for_all_of_it(loop):
    df = simulate(two_long_prompts(True, loop)).requests.sort_values("first_scheduled")
    first, second = df.iloc[0], df.iloc[1]
    assert df["preemptions"].sum() == 0
    # at most 64 - 38 blocks are free while the first runs: the second's 38 fit once it is done
    assert second["first_scheduled"] >= first["completion"]


def test_admitting_the_first_chunk_only_preempts():
    """The second's first chunk (168 tokens after the first's last chunk) fits, its next one does
    not; the first's decode outgrows what is left and preempts it."""
    r = simulate(two_long_prompts(False))
    df = r.requests.sort_values("arrival")
    assert r.summary["preemptions"] >= 1
    assert df["first_scheduled"].max() < df["completion"].min()  # both got in before either finished
    assert (df["status"] == "finished").all()


def test_the_vllm_preset_admits_as_vllm_v1_does():
    s = scenario(engine="vllm")
    assert s.scheduler.admit_whole_prompt and s.scheduler.watermark == 0.0
    v0 = scenario(engine="vllm-v0")
    assert not v0.scheduler.admit_whole_prompt and v0.scheduler.watermark == 0.01
