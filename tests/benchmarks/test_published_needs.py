"""Cases of benchmarks/published/ that `need` what the harness cannot simulate yet (issue 30: wide EP,
DP attention, PD disaggregation, MTP, KV tiers) are skipped and counted, never scored."""

from __future__ import annotations

import yaml

from benchmarks import published


def test_cases_with_unmet_needs_are_skipped_and_counted():
    path = published.HERE / "sources" / "mooncake-ssd-offload-qwen3-8b-a100.yaml"
    n = len(yaml.safe_load(path.read_text())["cases"])
    assert published.load_cases(["mooncake-ssd-offload-qwen3-8b-a100"]) == []
    assert sum(published.SKIPPED.values()) == n and "kv-tiers+multi-turn" in published.SKIPPED


def test_no_loaded_case_needs_anything_unsupported():
    needing = set()
    for path in (published.HERE / "sources").glob("*.yaml"):
        for c in yaml.safe_load(path.read_text())["cases"]:
            if published.unmet_needs(c):
                needing.add(c["id"])
            elif set(c.get("needs") or ()) - published.SUPPORTED_NEEDS:  # only one phase of a PD setup
                assert c["disagg"]["measured"] in ("prefill", "decode")
    loaded = {c.id for c in published.load_cases()}
    assert needing and not needing & loaded
    assert sum(published.SKIPPED.values()) == len(needing)


def test_one_phase_measured_alone_runs_as_a_replica_of_that_phase():
    """The LMSYS wide-EP runs measured prefill on 32 GPUs and decode on 72, each with the other
    phase unlimited: a replica of the phase's GPUs doing only that phase (the MTP run is skipped)."""
    cases = {c.id: c for c in published.load_cases(["lmsys-2025-05-large-scale-ep-dsv3-h100"])}
    assert len(cases) == 5 and published.SKIPPED == {"mtp": 1}
    pre = published.scenario_dict(cases["lmsys0505ep-inthrnode-i01024-h100x32-deepseek-v3-fp8-dp32ep32-prefill"])
    assert "disaggregation" not in pre
    assert pre["hardware"]["dp_attention"] == 32 and pre["hardware"]["two_batch_overlap"]
    assert pre["workload"]["output_len"] == {"dist": "fixed", "value": 1}
    assert pre["scheduler"]["chunk_size"] == 16384 * 32 and pre["workload"]["num_requests"] == 10 * 32 * 16
    dec = published.scenario_dict(cases["lmsys0505ep-outthrnode-i02000-h100x72-deepseek-v3-fp8-dp72ep72-decode-b0256"])
    assert dec["scheduler"]["max_num_seqs"] == 256 * 72 == dec["workload"]["num_requests"]
    assert dec["workload"]["prompt_len"]["value"] + published.PHASE_DECODE / 2 == 2000


def test_dp_attention_cases_run_as_one_replica_of_their_expert_parallel_group():
    cases = published.load_cases(["trtllm-dsr1-best-perf-practice"])
    assert len(cases) == 6 and {c.dp_attention for c in cases} == {8} and all(c.replicas == 1 for c in cases)
    big = next(c for c in cases if c.id.endswith("c7168"))
    d = published.scenario_dict(big)
    assert d["hardware"] == {"gpu": "B200", "tp": 8, "pp": 1, "expert_parallel": True, "dp_attention": 8,
                             "memory_utilization": 0.93}
    assert d["scheduler"]["max_num_seqs"] == 896 * 8 and d["scheduler"]["max_batched_tokens"] == 2048 * 8


def test_disaggregated_cases_are_scored_only_when_asked_and_on_catalog_gpus():
    source = ["mooncake-vllm-pd-qwen3-8b-h800"]
    assert published.load_cases(source) == [] and published.SKIPPED == {"pd-disagg": 9}
    cases = published.load_cases(source, frozenset({"pd-disagg"}))
    assert len(cases) == 9 and all(c.replicas == 1 for c in cases)
    d = published.scenario_dict(cases[0])
    assert "hardware" not in d and d["disaggregation"]["prefill"]["count"] == 1
    assert d["disaggregation"]["decode"]["hardware"]["gpu"] == "H800"
    # a GPU the catalog does not have is named as what is missing
    assert published.load_cases(["mooncake-sglang-pd-qwen3-235b-h20"], frozenset({"pd-disagg"})) == []
    assert published.SKIPPED == {"gpu H20-3e": 9}
