"""Study files: expansion, and errors that name the study file, the field and what was expected."""

from __future__ import annotations

import pytest

from sim.cli.app import main
from sim.study.plan import plan_study, run_key
from sim.study.schema import StudyError, load_study

from .helpers import SMALL, write_study

MAX_RATE = {"kind": "max_rate", "bracket": [1, 32]}


def plan(tmp_path, study, scenario=SMALL):
    path = write_study(tmp_path, study, scenario)
    return plan_study(load_study(path), path)


def error(tmp_path, study, scenario=SMALL) -> StudyError:
    with pytest.raises(StudyError) as e:
        plan(tmp_path, study, scenario)
    return e.value


def test_grid_zip_and_cases_multiply(tmp_path):
    p = plan(tmp_path, {
        "vary": {"grid": {"scheduler.policy": ["continuous", "chunked-prefill"]},
                 "zip": {"hardware.tp": [1, 2], "replicas": [2, 1]},
                 "cases": [{"name": "short", "set": {"workload.output_len":
                                                     {"dist": "fixed", "value": 16}}},
                           {"name": "long", "set": {}}]},
        "objective": MAX_RATE})
    assert len(p.configs) == 2 * 2 * 2
    assert p.swept == ["case", "scheduler.policy", "hardware.tp", "replicas"]
    assert p.configs[0].label == "short, policy=continuous, tp=1, replicas=2"
    assert {c.num_gpus for c in p.configs} == {2}
    assert len({run_key(c.data) for c in p.configs}) == 8


def test_run_keys_are_stable_and_see_the_seed(tmp_path):
    a = plan(tmp_path, {"objective": MAX_RATE}).configs[0]
    b = plan(tmp_path, {"objective": MAX_RATE}).configs[0]
    c = plan(tmp_path, {"set": {"seed": 7}, "objective": MAX_RATE}).configs[0]
    assert run_key(a.data) == run_key(b.data) != run_key(c.data)


def test_base_scenario_is_relative_to_the_study_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)
    p = plan(tmp_path, {"objective": MAX_RATE})
    assert p.scenario_path == (tmp_path / "base.yaml").resolve()


@pytest.mark.parametrize(("study", "field", "words"), [
    ({"objective": MAX_RATE, "vary": {"grid": {"scheduler.policy": ["continuous", "fifo"]}}},
     "vary.grid.scheduler.policy", ["scheduler.policy=fifo", "static", "continuous"]),
    ({"objective": MAX_RATE, "vary": {"grid": {"schedular.policy": ["static"]}}},
     "vary.grid.schedular.policy", ["unknown field"]),
    ({"objective": MAX_RATE, "vary": {"zip": {"hardware.tp": [1, 2], "replicas": [1]}}},
     "vary", ["same length"]),
    ({"objective": MAX_RATE, "set": {"model": "llama-3-70b"}},
     "set.model", ["does not fit"]),
    ({"objective": {"kind": "max_rate", "bracket": [8, 2]}}, "objective.bracket",
     ["low < high"]),
    ({"objective": {"kind": "fastest"}}, "objective", ["max_rate, cheapest or curves"]),
    ({"objective": MAX_RATE, "colour": "red"}, "colour", ["unknown field"]),
    ({"objective": {**MAX_RATE, "limits": {"ttft_p42": 1}}}, "objective.limits",
     ["latency metric"]),
    ({"objective": MAX_RATE, "prices": {"TPU-v9": 1.0}}, "prices", ["unknown GPU"]),
    ({"objective": MAX_RATE, "vary": {"grid": {"workload.arrival.rate": [1, 2]}}},
     "vary.grid.workload.arrival.rate", ["set by the max_rate objective"]),
    ({"objective": {"kind": "curves", "rates": [1], "rank_by": "speed"}},
     "objective.rank_by", ["unknown metric"]),
])
def test_bad_studies_name_the_file_field_and_expectation(tmp_path, study, field, words):
    e = error(tmp_path, study)
    assert e.source.endswith("study.yaml")
    assert e.field == field
    for w in words:
        assert w in str(e), str(e)


def test_a_missing_trace_stops_the_study_before_any_run(tmp_path):
    scenario = {**SMALL, "workload": {"trace": {"path": "nowhere.csv"}}}
    e = error(tmp_path, {"objective": {"kind": "cheapest"}}, scenario)
    assert "nowhere.csv" in str(e) and "not found" in str(e)


def test_cli_exits_2_with_a_message_not_a_traceback(tmp_path, capsys):
    path = write_study(tmp_path, {"objective": MAX_RATE,
                                  "vary": {"grid": {"replicas": [1, 0]}}}, SMALL)
    assert main(["study", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "study.yaml: vary.grid.replicas" in err and "replicas=0" in err
    assert "Traceback" not in err
    assert main(["study", str(tmp_path / "missing.yaml")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("objective: [unclosed\n")
    assert main(["study", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
