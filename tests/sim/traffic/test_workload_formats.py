"""Trace formats: BurstGPT, Mooncake and generic CSV/JSONL parse small fixtures, and bad data
gets an error naming the file, the line and the column."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from pydantic import ValidationError

from sim.cli.app import main
from sim.errors import ScenarioError, TraceError
from sim.traffic import build_workload, read_trace, trace_formats
from sim.traffic.schema import TraceWorkload, WorkloadSpec
from sim.traffic.trace_formats import (
    read_burstgpt_trace,
    read_mapped_trace,
    read_mooncake_trace,
)
from tests.sim.helpers import scenario

BURSTGPT = """\
Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,230,1317,Conversation log
118,GPT-4,417,276,693,Conversation log
120.5,ChatGPT,300,0,300,Conversation log
130,GPT-4,0,0,0,API log
140,ChatGPT,0,12,12,API log
100,ChatGPT,37,1656,1693,Conversation log
"""

MOONCAKE_RECORDS = [
    {"timestamp": 0, "input_length": 1100, "output_length": 52, "hash_ids": [0, 1, 2]},
    {"timestamp": 1500, "input_length": 1024, "output_length": 26, "hash_ids": [0, 1]},
    {"timestamp": 250, "input_length": 700, "output_length": 10, "hash_ids": [3, 4]},
]


def write_mooncake(path, records=MOONCAKE_RECORDS):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def spec(**fields) -> TraceWorkload:
    return TraceWorkload(**fields)


# -- BurstGPT --------------------------------------------------------------------------------
def test_burstgpt_drops_failures_and_counts_them(tmp_path):
    (tmp_path / "b.csv").write_text(BURSTGPT)
    tr = read_burstgpt_trace(tmp_path / "b.csv")
    # 7 rows: two failures (0 response tokens), one empty prompt; the rest sorted by time
    assert len(tr) == 4
    np.testing.assert_allclose(tr.arrival, [0, 40, 95, 113])
    np.testing.assert_array_equal(tr.prompt_len, [472, 1087, 37, 417])
    np.testing.assert_array_equal(tr.output_len, [18, 230, 1656, 276])
    assert any("dropped 2 failed request(s)" in n for n in tr.notes)
    assert any("dropped 1 request(s) with 0 request tokens" in n for n in tr.notes)


def test_burstgpt_model_filter(tmp_path):
    (tmp_path / "b.csv").write_text(BURSTGPT)
    gpt4 = read_burstgpt_trace(tmp_path / "b.csv", model="GPT-4")
    np.testing.assert_array_equal(gpt4.prompt_len, [417])
    with pytest.raises(TraceError, match=r"workload\.trace\.model.*'Claude'.*ChatGPT"):
        read_burstgpt_trace(tmp_path / "b.csv", model="Claude")


@pytest.mark.parametrize("row,fragments", [
    ("7,ChatGPT,12.5,3,15,API log", ["Request tokens (line 3)", "whole number", "12.5"]),
    ("soon,ChatGPT,12,3,15,API log", ["Timestamp (line 3)", "expected a number", "soon"]),
    ("8,ChatGPT,12,-3,9,API log", ["Response tokens (line 3)", "non-negative"]),
])
def test_burstgpt_bad_value_names_line_and_column(tmp_path, row, fragments):
    lines = BURSTGPT.splitlines()
    (tmp_path / "b.csv").write_text("\n".join([lines[0], lines[1], row, *lines[2:]]) + "\n")
    with pytest.raises(TraceError) as e:
        read_burstgpt_trace(tmp_path / "b.csv")
    assert "b.csv" in str(e.value)
    for f in fragments:
        assert f in str(e.value)


def test_burstgpt_missing_column(tmp_path):
    (tmp_path / "b.csv").write_text("Timestamp,Model,Request tokens\n1,ChatGPT,5\n")
    with pytest.raises(TraceError, match=r"missing column.*Response tokens"):
        read_burstgpt_trace(tmp_path / "b.csv")


# -- Mooncake --------------------------------------------------------------------------------
def test_mooncake_parses_times_lengths_and_hash_ids(tmp_path):
    tr = read_mooncake_trace(write_mooncake(tmp_path / "m.jsonl"))
    np.testing.assert_allclose(tr.arrival, [0.0, 0.25, 1.5])  # milliseconds, sorted
    np.testing.assert_array_equal(tr.prompt_len, [1100, 700, 1024])
    np.testing.assert_array_equal(tr.hash_offsets, [0, 3, 5, 7])
    np.testing.assert_array_equal(tr.hash_ids, [0, 1, 2, 3, 4, 0, 1])


@pytest.mark.parametrize("bad_line,fragments", [
    ('{"timestamp": 3, "input_length": 10, "output_length": 2, "hash_ids": [0,]}',
     ["line 2, column", "not valid JSON"]),
    ('{"timestamp": 3, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}',
     ["hash_ids (line 2)", "list of whole numbers"]),
    ('{"timestamp": 3, "input_length": 0, "output_length": 2, "hash_ids": []}',
     ["input_length (line 2)", "positive whole number"]),
    ('{"timestamp": 3, "input_length": 10, "hash_ids": []}',
     ["output_length (line 2)", "missing"]),
    ('[1, 2]', ["line 2", "expected a JSON object"]),
])
def test_mooncake_bad_line_names_line_and_column(tmp_path, bad_line, fragments):
    good = json.dumps(MOONCAKE_RECORDS[0])
    (tmp_path / "m.jsonl").write_text(f"{good}\n{bad_line}\n{good}\n")
    with pytest.raises(TraceError) as e:
        read_mooncake_trace(tmp_path / "m.jsonl")
    assert "m.jsonl" in str(e.value)
    for f in fragments:
        assert f in str(e.value), str(e.value)


@pytest.mark.parametrize("gz", [False, True], ids=["jsonl", "jsonl.gz"])
@pytest.mark.parametrize("layout", ["plain", "no final newline", "blank line", "float time"])
def test_mooncake_fast_reader_agrees_with_the_line_by_line_one(tmp_path, monkeypatch, layout, gz):
    records = [dict(r) for r in MOONCAKE_RECORDS]
    if layout == "float time":
        records[1]["timestamp"] = 250.5  # pyarrow reads a float column: the careful reader takes it
    lines = [json.dumps(r) for r in records]
    text = "\n".join(lines) + "\n"
    if layout == "no final newline":
        text = text[:-1]
    if layout == "blank line":
        text = f"{lines[0]}\n\n{lines[1]}\n{lines[2]}\n"
    path = tmp_path / ("m.jsonl.gz" if gz else "m.jsonl")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    assert (trace_formats._mooncake_columns(path) is not None) == (layout in ("plain", "no final newline"))
    fast = read_mooncake_trace(path, hash_block_size=512)
    monkeypatch.setattr(trace_formats, "_mooncake_columns", lambda p: None)
    slow = read_mooncake_trace(path, hash_block_size=512)
    for f in ("arrival", "prompt_len", "output_len", "hash_offsets", "hash_ids"):
        a, b = getattr(fast, f), getattr(slow, f)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fast.hash_ids, [0, 1, 2, 3, 4, 0, 1])  # sorted by time


def test_a_gzipped_csv_trace_reads_as_the_plain_one(tmp_path):
    (tmp_path / "b.csv").write_text(BURSTGPT)
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(BURSTGPT.encode()))
    plain, packed = read_burstgpt_trace(tmp_path / "b.csv"), read_burstgpt_trace(tmp_path / "b.csv.gz")
    np.testing.assert_array_equal(plain.arrival, packed.arrival)
    np.testing.assert_array_equal(plain.prompt_len, packed.prompt_len)


@pytest.mark.parametrize("name,fmt", [("m.jsonl.gz", "mooncake"), ("t.jsonl.gz", "jsonl"), ("b.csv.gz", "burstgpt")])
def test_a_broken_gzip_trace_is_named_with_exit_2(tmp_path, capsys, name, fmt):
    text = BURSTGPT if fmt == "burstgpt" else json.dumps(MOONCAKE_RECORDS[0]) + "\n"
    whole = gzip.compress((text * 50).encode())
    (tmp_path / name).write_bytes(whole[: len(whole) // 2])
    extra = ", columns: {arrival: timestamp, prompt_len: input_length, output_len: output_length}" * (fmt == "jsonl")
    (tmp_path / "s.yaml").write_text(f"workload: {{trace: {{path: {name}, format: {fmt}{extra}}}}}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert name in err and "workload.trace.path" in err and "gzip" in err, err


def test_mooncake_errors_name_the_line_after_a_blank_one(tmp_path):
    bad = {**MOONCAKE_RECORDS[1], "input_length": -3}
    (tmp_path / "m.jsonl").write_text(f"{json.dumps(MOONCAKE_RECORDS[0])}\n\n{json.dumps(bad)}\n")
    with pytest.raises(TraceError, match=r"input_length \(line 3\)"):
        read_mooncake_trace(tmp_path / "m.jsonl")


# -- generic CSV / JSONL ---------------------------------------------------------------------
COLUMNS = {"arrival": "t", "prompt_len": "in", "output_len": "out"}


def test_generic_csv_with_column_map_and_time_unit(tmp_path):
    (tmp_path / "g.csv").write_text("id,t,in,out\na,2000,10,3\nb,500,20,4\nc,1500,30,5\n")
    tr = read_trace(spec(path="x", format="csv", columns=COLUMNS, time_unit="ms"),
                    tmp_path / "g.csv")
    np.testing.assert_allclose(tr.arrival, [0.0, 1.0, 1.5])
    np.testing.assert_array_equal(tr.prompt_len, [20, 30, 10])
    np.testing.assert_array_equal(tr.output_len, [4, 5, 3])


def test_generic_jsonl_with_datetimes(tmp_path):
    rows = [{"t": "2024-05-01 10:00:01.5", "in": 7, "out": 1},
            {"t": "2024-05-01 10:00:00", "in": 8, "out": 2}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    tr = read_trace(spec(path="x", format="jsonl", columns=COLUMNS, datetime=True),
                    tmp_path / "g.jsonl")
    np.testing.assert_allclose(tr.arrival, [0.0, 1.5])
    np.testing.assert_array_equal(tr.prompt_len, [8, 7])


@pytest.mark.parametrize("fmt,text,fragments", [
    ("csv", "t,in,out\n1,10,3\n2,ten,4\n", ["in (line 3)", "positive whole number", "ten"]),
    ("csv", "t,in,out\n1,10,3\n,10,4\n", ["t (line 3)", "expected a number"]),
    ("csv", "time,in,out\n1,10,3\n", ["missing column", "'t'", "found time,in,out"]),
    ("jsonl", '{"t": 1, "in": 10, "out": 3}\n\n{"t": 2, "in": 10, "out": 0}\n',
     ["out (line 3)", "positive whole number"]),
    ("jsonl", '{"t": 1, "in": 10, "out": 3}\n{"t": 2 "in": 1}\n', ["line 2, column 9", "not valid JSON"]),
])
def test_generic_bad_data_names_line_and_column(tmp_path, fmt, text, fragments):
    (tmp_path / f"g.{fmt}").write_text(text)
    with pytest.raises(TraceError) as e:
        read_mapped_trace(tmp_path / f"g.{fmt}", "workload.trace.path", fmt, ("t", "in", "out"))
    assert f"g.{fmt}" in str(e.value)
    for f in fragments:
        assert f in str(e.value), str(e.value)


# -- schema ----------------------------------------------------------------------------------
@pytest.mark.parametrize("trace,loc,fragments", [
    ({"path": "t.csv", "format": "csv"}, ("trace",), ["format csv needs 'columns'"]),
    ({"path": "t.csv", "model": "GPT-4"}, ("trace",),
     ["'model' applies only to format burstgpt, not azure"]),
    ({"path": "t.csv", "format": "burstgpt", "hash_block_size": 256}, ("trace",),
     ["'hash_block_size' applies only to format mooncake"]),
    ({"path": "t.csv", "format": "mooncake", "time_unit": "ms"}, ("trace",),
     ["'time_unit' applies only to format csv or jsonl"]),
    ({"path": "t.csv", "format": "parquet"}, ("trace", "format"), ["'burstgpt'"]),
    ({"path": "t.csv", "format": "csv", "columns": {"arrival": "t", "prompt_len": "p"}},
     ("trace", "columns", "output_len"), ["required"]),
])
def test_schema_checks_fields_against_format(trace, loc, fragments):
    with pytest.raises(ValidationError) as e:
        WorkloadSpec.model_validate({"trace": trace})
    err = e.value.errors()[0]
    assert err["loc"] == loc
    for f in fragments:
        assert f in err["msg"], err["msg"]
    with pytest.raises(ScenarioError, match="workload"):  # and the scenario reports it
        scenario(workload={"trace": trace})


def test_each_format_replays_through_build_workload(tmp_path):
    (tmp_path / "b.csv").write_text(BURSTGPT)
    write_mooncake(tmp_path / "m.jsonl")
    (tmp_path / "g.csv").write_text("t,in,out\n0,10,3\n1,20,4\n")
    for trace, n in [({"path": str(tmp_path / "b.csv"), "format": "burstgpt"}, 4),
                     ({"path": str(tmp_path / "m.jsonl"), "format": "mooncake"}, 3),
                     ({"path": str(tmp_path / "g.csv"), "format": "csv", "columns": COLUMNS}, 2)]:
        w = build_workload(scenario(workload={"trace": trace}))
        assert len(w) == n and (np.diff(w.arrival) >= 0).all()
    w = build_workload(scenario(workload={"trace": {"path": str(tmp_path / "b.csv"),
                                                    "format": "burstgpt"}}))
    assert any("failed request" in note for note in w.notes)


def test_arrivals_and_empirical_lengths_accept_other_formats(tmp_path):
    (tmp_path / "b.csv").write_text(BURSTGPT)
    write_mooncake(tmp_path / "m.jsonl")
    w = build_workload(scenario(workload={
        "num_requests": 50,
        "arrival": {"process": "trace", "path": str(tmp_path / "b.csv"), "format": "burstgpt"},
        "prompt_len": {"dist": "empirical", "path": str(tmp_path / "m.jsonl"),
                       "format": "mooncake", "column": "prompt_len"},
        "output_len": {"dist": "fixed", "value": 5}}))
    assert len(w) == 4  # the trace's arrivals run out before num_requests
    assert set(w.prompt_len) <= {1100, 1024, 700}


def test_bad_new_format_trace_exits_2_naming_file_line_and_column(tmp_path, capsys):
    (tmp_path / "b.csv").write_text(BURSTGPT.replace("45,ChatGPT,1087", "45,ChatGPT,lots"))
    (tmp_path / "s.yaml").write_text("workload: {trace: {path: b.csv, format: burstgpt}}\n")
    code = main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2 and "Traceback" not in text
    assert "b.csv" in text and "Request tokens (line 3)" in text


def test_shared_azure_trace_reads_through_the_dispatcher(azure_trace):
    tr = read_trace(spec(path=str(azure_trace)), azure_trace)
    assert 19_000 < len(tr) < 20_000 and tr.hash_ids is None
