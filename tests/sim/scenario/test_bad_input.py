"""Every class of bad input gets a message naming the file, the field and what was expected,
exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sim.cli.app import main

GOOD = """
model: llama-3-8b
workload:
  num_requests: 10
  arrival: {process: poisson, rate: 5}
"""


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


CASES = [
    # (yaml text, expected fragments in the message)
    ("scheduler: {policy: static}\ndisaggregation: {prefill: {count: 1}, decode: {count: 1}}\n",
     ["static", "continuous or chunked-prefill"]),
    ("workload: {arrival: {process: closed, concurrency: 0}}\n", ["workload.arrival.concurrency"]),
    ("model: llama-3-8b\nbogus: 1\n", ["bogus", "unknown field"]),
    ("engine: {name: []}\n", ["engine.name"]),  # not a name: was a TypeError in the presets' lookup
    ("model: llama-3-8b\nworkload: {arrival: {process: poisson, rate: -2}}\n",
     ["workload.arrival.rate", "greater than 0"]),
    ("model: llama-3-8b\nworkload: {arrival: {process: poisson, rate: fast}}\n",
     ["workload.arrival.rate", "valid number"]),
    ("model: llama-3-8b\nscheduler: {policy: chunked-prefill, chunk_size: 0}\n",
     ["scheduler.chunk_size", "greater than 0"]),
    ("model: llama-3-70b\nhardware: {gpu: H100-SXM, tp: 1}\n",
     ["hardware", "does not fit", "llama-3-70b"]),
    ("model: llama-9\n", ["model", "unknown model"]),
    ("hardware: {gpu: K80}\n", ["hardware.gpu", "unknown GPU"]),
    ("workload: {prompt_len: {dist: uniform, min: 10, max: 5}}\n",
     ["workload.prompt_len", "min (10) must be ≤ max (5)"]),
    ("workload: {arrival: {process: gammy, rate: 1}}\n", ["workload.arrival", "poisson"]),
    # a tagged block without its tag says what to write (pydantic: "Unable to extract tag")
    ("workload: {arrival: {rate: 4}}\n", ["workload.arrival", "{process: poisson, rate: 4}", "got no 'process'"]),
    ("workload: {prompt_len: {mean: 600}}\n",
     ["workload.prompt_len", "expected dist: one of", "{dist: lognormal, mean: 600, sigma: 0.9}"]),
    ("workload: {output_len: {dist: gauss, mean: 9}}\n", ["workload.output_len", "got dist: 'gauss'"]),
    ("workload: {conversations: {turns: {dist: fixed, value: 2}, think_time_s: {mean: 3}}}\n",
     ["workload.conversations.think_time_s", "{dist: exponential, mean: 3}"]),
    ("workload: {arrival: {process: poisson, rate: {base: 4, bursts: [x2]}}}\n",
     ["workload.arrival.rate.bursts[0]", "expected a burst like 'x2 for 60 s at 120 s'"]),
    ("scheduler: {policy: chunked-prefill, chunk_size: 64, max_num_seqs: 256}\n",
     ["scheduler", "chunk_size (64) must be ≥ max_num_seqs (256)"]),
    ("model: [unclosed\n", ["not valid YAML", "line"]),
    ("- just\n- a list\n", ["expected a mapping"]),
    ("hardware: {memory_utilization: 1.5}\n", ["hardware.memory_utilization", "less than or equal"]),
    ("workload: {trace: {path: nowhere.csv}}\n", ["nowhere.csv", "workload.trace.path", "not found"]),
    # silently accepted before: a key given twice, booleans as numbers, non-finite numbers
    ("seed: 1\nmodel: llama-3-8b\nseed: 2\n", ["duplicate key 'seed'", "line 3, column 1", "line 1"]),
    ("workload: {arrival: {process: poisson, rate: 1, rate: 2}}\n", ["duplicate key 'rate'"]),
    ("replicas: true\n", ["replicas", "expected a whole number, got true"]),
    ("hardware: {tp: 2.0}\n", ["hardware.tp", "expected a whole number, got 2.0"]),
    ("hardware: {memory_utilization: false}\n", ["hardware.memory_utilization", "expected a number"]),
    ("workload: {arrival: {process: poisson, rate: .inf}}\n", ["workload.arrival.rate", "finite"]),
    ("workload: {arrival: {process: poisson, rate: .nan}}\n", ["workload.arrival.rate", "finite"]),
    ("workload: {prompt_len: {dist: lognormal, mean: .inf, sigma: 1}}\n",
     ["workload.prompt_len.mean", "finite"]),
    ("workload: {prompt_len: {dist: lognormal, mean: 100, sigma: 1, min: 50, max: 10}}\n",
     ["workload.prompt_len", "min (50) must be ≤ max (10)"]),
    ("workload: {output_len: {dist: normal, mean: 100, std: 1, min: 50, max: 10}}\n",
     ["workload.output_len", "min (50) must be ≤ max (10)"]),
    ("workload: {num_requests: 1000000000000000000000000000000}\n",
     ["workload.num_requests", "less than or equal to 100000000"]),
    ("workload: {num_requests: 1e30}\n", ["workload.num_requests", "whole number"]),
    ("workload: {trace: {path: t.csv, rate: 2, time_scale: 3}}\n",
     ["workload.trace", "time_scale or rate, not both"]),
    ("workload: {arrival: {process: trace, path: t.csv, rate: 2, time_scale: 3}}\n",
     ["workload.arrival", "time_scale or rate, not both"]),
    ("seed: -1\n", ["seed", "from 0 to 2**63 - 1"]),
    (f"seed: {2**63}\n", ["seed", "from 0 to 2**63 - 1"]),
    ("base_dir: /etc\n", ["base_dir", "unknown field"]),
    ("disaggregation: {decode: {count: 2147483647}}\n",
     ["disaggregation.decode.count", "less than or equal to 10000"]),
    ("replica_groups: [{count: 6000}, {count: 6000}]\n", ["replica_groups", "more than 10,000 replicas"]),
    ("replica_groups: []\n", ["replica_groups", "at least 1 item"]),
    ("workload: {output_len: {dist: lognormal, mean: 10, sigma: 1e308}}\n",
     ["workload.output_len.sigma", "less than or equal to 10"]),
    ("hardware: {host_memory_gb: 1e300}\nscheduler: {preemption: swap}\n",
     ["hardware.host_memory_gb", "less than or equal"]),
    # the wrong field blamed before: the hardware, where a block larger than all KV memory is at fault
    ("scheduler: {block_size: 2147483647}\n", ["scheduler.block_size", "one KV block of 2147483647 tokens"]),
    ("replica_groups: [{count: 1}, {count: 1, scheduler: {block_size: 2147483647}}]\n",
     ["replica_groups[1].scheduler.block_size"]),
    # speculative acceptance per position: each form checked, and against the others
    ("scheduler: {speculative: {method: ngram, num_tokens: 3, acceptance_rates: [0.8, 0.6]}}\n",
     ["scheduler.speculative", "acceptance_rates: expected 3 values", "got 2"]),
    ("scheduler: {speculative: {method: ngram, acceptance_rates: [0.8, 1.0]}}\n",
     ["scheduler.speculative.acceptance_rates[1]", "less than 1"]),
    ("scheduler: {speculative: {method: ngram, accepted_per_position: [0.5, 0.6]}}\n",
     ["scheduler.speculative", "accepted_per_position: position 2 (0.6) above position 1 (0.5)"]),
    ("scheduler: {speculative: {method: ngram, acceptance_rate: 0.5, acceptance_rates: [0.5, 0.4]}}\n",
     ["scheduler.speculative", "acceptance_rate: 0.5 disagrees", "[0.5, 0.4]"]),
]


@pytest.mark.parametrize("text,fragments", CASES)
def test_bad_scenario_names_file_and_field(tmp_path, capsys, text, fragments):
    path = write(tmp_path, text)
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "Traceback" not in out
    assert "s.yaml" in out or "nowhere.csv" in out
    for f in fragments:
        assert f in out, f"{f!r} not in {out!r}"
    assert "Unable to extract tag" not in out and "does not match any of the expected tags" not in out
    assert not (tmp_path / "out").exists(), "no results for a scenario that failed validation"


@pytest.mark.parametrize("override,fragments", [
    ("workload.arrival.rate=0", ["workload.arrival.rate", "greater than 0"]),
    ("seed=-1", ["seed", "from 0 to 2**63 - 1"]),
    ("replicas=true", ["replicas", "got true"]),
    ("workload.num_requests=1000000000000000000000000000000", ["workload.num_requests"]),
    ("workload.arrival={process: poisson, rate: 1, rate: 2}", ["--set", "duplicate key 'rate'"]),
    ("=3", ["--set", "expected field.path=value"]),
    ("scheduler.nope=3", ["scheduler.nope", "unknown field"]),
    ("no-equals-sign", ["--set", "expected field.path=value"]),
    ("seed.x=1", ["seed", "valid integer"]),
    ("workload.num_requests.x=1", ["workload.num_requests", "cannot set"]),
])
def test_bad_override(tmp_path, capsys, override, fragments):
    path = write(tmp_path, GOOD)
    code, out = run_cli(capsys, "run", str(path), "--set", override, "--out", str(tmp_path / "o"))
    assert code == 2
    for f in fragments:
        assert f in out


BAD_TRACES = [
    ("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n",
     ["missing column", "ContextTokens"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n", ["TIMESTAMP (line 2)", "datetime"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n"
     "2023-11-16 18:15:47.1,-3,5\n", ["ContextTokens (line 3)", "positive whole number"]),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", ["no requests"]),
]


@pytest.mark.parametrize("csv,fragments", BAD_TRACES)
def test_bad_trace_names_file_line_and_column(tmp_path, capsys, csv, fragments):
    (tmp_path / "t.csv").write_text(csv)
    path = write(tmp_path, "workload: {trace: {path: t.csv}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "t.csv" in out
    for f in fragments:
        assert f in out, f"{f!r} not in {out!r}"


def test_missing_scenario_file(tmp_path, capsys):
    code, out = run_cli(capsys, "run", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert "absent.yaml" in out and "scenario file not found" in out


def test_bad_cli_argument_exits_2_without_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--format", "xls"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "invalid choice" in p.stderr and "Traceback" not in p.stderr


def test_a_yaml_number_in_exponent_form_is_a_number(tmp_path, capsys):
    # PyYAML reads "1e3" as text (YAML 1.1); a strict schema would then refuse it
    path = write(tmp_path, "workload: {num_requests: 5, arrival: {process: poisson, rate: 1e3}}\n"
                           "cost: {step_overhead_s: 2e-3}\n")
    from sim.scenario.load import load_scenario

    s = load_scenario(path)
    assert s.workload.arrival.rate == 1000.0 and s.cost.step_overhead_s == 0.002


# -- files that are not what they should be ---------------------------------------------------
LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f3"
               "2b1258daaa5e2ca24d17e2393\nsize 12345\n")


@pytest.mark.parametrize("content,fragments", [
    (b"name: caf\xe9\n", ["not UTF-8", "line 1, column 10"]),  # Latin-1
    (bytes(range(128, 256)), ["not UTF-8", "line 1, column 1"]),
    (b"", ["empty (or only comments)"]),
    (b"# nothing here\n\n   # or here\n", ["empty (or only comments)"]),
    (LFS_POINTER.encode(), ["Git LFS pointer"]),
])
def test_unreadable_scenario_files(tmp_path, capsys, content, fragments):
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in out and "s.yaml" in out
    for f in fragments:
        assert f in out, out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field_yaml,where", [
    ("workload: {{trace: {{path: {p}}}}}", "workload.trace.path"),
    ("workload: {{trace: {{path: {p}, format: mooncake}}}}", "workload.trace.path"),
    ("workload: {{num_requests: 5, arrival: {{process: trace, path: {p}}}}}", "workload.arrival.path"),
    ("workload: {{num_requests: 5, prompt_len: {{dist: empirical, path: {p}, column: prompt_len, "
     "format: burstgpt}}}}", "workload.prompt_len.path"),
    ("model: {{hf_config: {p}}}", None),
    ("cost: {{model: profile, profile: {p}}}", "cost.profile"),
])
@pytest.mark.parametrize("kind", ["folder", "lfs"])
def test_folders_and_lfs_pointers_where_a_file_is_expected(tmp_path, capsys, field_yaml, where, kind):
    target = tmp_path / "thing"
    if kind == "folder":
        target.mkdir()
        (target / "config.json").mkdir()  # a model folder whose config.json is a folder too
    else:
        target.write_text(LFS_POINTER)
    path = write(tmp_path, field_yaml.format(p=target) + "\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in out
    assert ("is a folder" if kind == "folder" else "Git LFS pointer") in out, out
    assert "not found" not in out
    if where:
        assert where in out


def test_a_non_utf8_trace_names_the_line(tmp_path, capsys):
    (tmp_path / "t.csv").write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     b"2023-11-16 18:15:46.68,1\xe9,5\n")
    path = write(tmp_path, "workload: {trace: {path: t.csv}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "t.csv" in out and "not UTF-8" in out and "line 2" in out


@pytest.mark.parametrize("ids,fragments", [
    ([0, 1], ["hash_ids (line 1)", "2 id(s) for input_length 1100; expected 3", "hash_block_size"]),
    ([0, 1, 2, 3], ["expected 3"]),
])
def test_mooncake_hash_ids_must_cover_the_prompt(tmp_path, capsys, ids, fragments):
    import json

    (tmp_path / "m.jsonl").write_text(json.dumps(
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": ids}) + "\n")
    path = write(tmp_path, "workload: {trace: {path: m.jsonl, format: mooncake}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "m.jsonl" in out
    for f in fragments:
        assert f in out, out
    # at the block size the trace was written with, the same line is fine
    path = write(tmp_path, "workload: {trace: {path: m.jsonl, format: mooncake, "
                           f"hash_block_size: {-(-1100 // len(ids))}}}}}\n")
    from sim.scenario.load import load_scenario
    from sim.traffic import build_workload

    assert len(build_workload(load_scenario(path))) == 1


# -- the model's config.json ------------------------------------------------------------------
HF = {"hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
      "num_hidden_layers": 4, "intermediate_size": 1024, "vocab_size": 1000}


@pytest.mark.parametrize("config,field,fragments", [
    ("[1, 2]", None, ["expected a JSON object", "got a list"]),
    ('{"hidden_size": 512,', None, ["not valid JSON", "line 1"]),
    ("[" * 100_000 + "]" * 100_000, None, ["not valid JSON: nested too deeply"]),
    ({k: v for k, v in HF.items() if k != "num_attention_heads"}, "num_attention_heads",
     ["missing; expected a positive whole number"]),
    ({**HF, "num_hidden_layers": -32}, "num_hidden_layers", ["greater than 0 (got -32)"]),
    ({**HF, "vocab_size": "1000"}, "vocab_size", ["got '1000'"]),
    ({**HF, "hidden_size": True}, "hidden_size", ["expected a whole number, got true"]),
    ({**HF, "num_key_value_heads": 3}, "num_key_value_heads", ["3 must divide num_attention_heads (8)"]),
    ({**{k: v for k, v in HF.items() if k != "num_key_value_heads"}, "num_attention_heads": 7}, "head_dim",
     ["does not divide hidden_size (512)"]),
    ({**HF, "num_local_experts": 4, "num_experts_per_tok": 8}, "num_experts_per_tok", ["exceeds the 4"]),
    ({**HF, "rope_theta": -1}, "rope_theta", ["greater than 0"]),
    ({**HF, "torch_dtype": "float8"}, "torch_dtype", ["'bfloat16' (got 'float8')"]),
])
def test_bad_hf_config_names_the_config_file_and_key(tmp_path, capsys, config, field, fragments):
    import json

    text = config if isinstance(config, str) else json.dumps(config)
    (tmp_path / "config.json").write_text(text)
    path = write(tmp_path, "model: {hf_config: config.json}\nworkload: {num_requests: 5}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    out = " ".join(out.split())
    assert code == 2 and "Traceback" not in out
    assert f"config.json: {field}:" in out if field else "config.json:" in out, out
    assert "model.hf_config of" in out and "s.yaml" in out
    for f in fragments:
        assert f in out, out


# -- traffic that cannot fit in memory --------------------------------------------------------
@pytest.mark.parametrize("workload,field", [
    ("{num_requests: null, duration_s: 1e12, arrival: {process: poisson, rate: 1e6}}",
     "workload.duration_s"),
    ("{num_requests: 10, conversations: {turns: {dist: fixed, value: 2000000000}, "
     "think_time_s: {dist: fixed, value: 1}}}", "workload.conversations.turns"),
    ("{num_requests: 10, shared_prefix: {num_prompts: 2000000000, length: 64}}",
     "workload.shared_prefix.num_prompts"),
])
def test_traffic_too_large_for_one_run_is_refused_by_name(tmp_path, capsys, workload, field):
    path = write(tmp_path, f"workload: {workload}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and field in out and "s.yaml" in out, out


def test_rate_needs_a_trace_that_spans_time(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.68,10,5\n2023-11-16 18:15:46.68,12,5\n")
    path = write(tmp_path, "workload: {trace: {path: t.csv, rate: 3}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "t.csv: workload.trace.rate" in out and "one instant" in out


@pytest.mark.parametrize("record,fragments", [
    ({"timestamp": 0, "input_length": True, "output_length": 5, "hash_ids": [0]},
     ["input_length (line 1)", "got True"]),
    ({"timestamp": False, "input_length": 10, "output_length": 5, "hash_ids": [0]},
     ["timestamp (line 1)", "expected a number"]),
    ({"timestamp": 0, "input_length": 10**20, "output_length": 5, "hash_ids": [0]},
     ["input_length (line 1)", "below 2**31"]),
])
def test_trace_values_keep_their_json_type(tmp_path, capsys, record, fragments):
    import json

    (tmp_path / "m.jsonl").write_text(json.dumps(record) + "\n")
    path = write(tmp_path, "workload: {trace: {path: m.jsonl, format: mooncake}}\n")
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "m.jsonl" in out
    for f in fragments:
        assert f in out, out


@pytest.mark.parametrize("args,words", [
    (["--set", b"name=caf\xe9"], "name: not UTF-8 text: byte 0xe9"),
    (["--out", b"o\xe9"], "--out: the name is not UTF-8 text"),
    ([b"caf\xe9.yaml"], "the name is not UTF-8 text"),
])
def test_command_line_text_that_is_not_utf8(tmp_path, args, words):
    # bytes a terminal cannot decode reach Python as surrogates; they must not reach the files
    import os

    path = write(tmp_path, GOOD)
    folder = os.fsencode(tmp_path) + b"/"
    args = [folder + a if a in (b"o\xe9", b"caf\xe9.yaml") else a for a in args]
    argv = args if isinstance(args[0], bytes) else [str(path), "--out", str(tmp_path / "o"), *args]
    p = subprocess.run([sys.executable, "-m", "sim.cli", "run", *argv], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert words in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize("text,words", [
    ("name: a\x01b\n", ["line 1, column 8", "#x0001 is not allowed"]),
    ("name: &a [*a]\n", ["refers to a block that contains it"]),
    ("a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8)),
     ["expands to more than 1,000,000 values"]),
    ("name: " + "[" * 3000 + "]" * 3000 + "\n", ["nest too deeply"]),
])
def test_yaml_that_is_no_document(tmp_path, capsys, text, words):
    path = write(tmp_path, text)
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "s.yaml" in out and "Traceback" not in out
    for w in words:
        assert w in out, out
