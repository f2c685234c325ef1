"""``servesim compare``: the winner marked ★ by a study's rule, SLO limits in neutral ink, bars
on linear axes, one colour per configuration, and a new folder for each comparison."""

from __future__ import annotations

import pandas as pd
import yaml

from sim.results.plotstyle import SLO_LINE, config_colors
from sim.study.compare import load_entries, pick_winner, summary_bars, summary_frame, write_compare

from .helpers import SMALL, run_cli


def _entries(tmp_path, *scenarios: dict):
    paths = []
    for i, data in enumerate(scenarios):
        paths.append(tmp_path / f"s{i}.yaml")
        paths[-1].write_text(yaml.safe_dump(data))
    return load_entries([str(p) for p in paths], {}, same_traffic=False)


def _record(attainment: float | None, ttft_p99: float = 0.1, cost_per_hour: float = 2.49) -> dict:
    return {"status": "ok", "summary": {"slo_attainment": attainment, "ttft_p99": ttft_p99,
                                        "cost_per_hour": cost_per_hour}}


def test_the_winner_is_the_cheapest_meeting_the_slo_ties_by_the_study_rule(tmp_path):
    a100 = {**SMALL, "name": "a100", "hardware": {"gpu": "A100-80GB"}}
    h100 = {**SMALL, "name": "h100", "hardware": {"gpu": "H100"}}
    h100b = {**SMALL, "name": "h100-b", "hardware": {"gpu": "H100"}}
    entries = _entries(tmp_path, h100, a100, h100b)
    for e, rec in zip(entries, [_record(0.95, 0.2), _record(0.95, cost_per_hour=1.79), _record(0.95, 0.1)],
                      strict=True):
        e.record = rec
    w = pick_winner(entries)
    assert w.name == "a100" and "cheapest" in w.note  # A100 at 1.79 $/h beats H100 at 2.49
    entries[1].record = _record(0.85, cost_per_hour=1.79)  # below the 90% a study asks by default
    w = pick_winner(entries)
    assert w.name == "h100-b" and "lower ttft_p99" in w.note  # equal cost and GPUs: the lower TTFT p99
    assert pick_winner(entries, slo_target=0.8).name == "a100"
    for e in entries:
        e.record = _record(0.5)
    w = pick_winner(entries)
    assert w.name is None and "no winner" in w.note


def test_compare_marks_the_winner_everywhere_and_draws_slo_limits_in_neutral_ink(tmp_path, capsys):
    cont = {**SMALL, "name": "policy-continuous"}
    static = {**SMALL, "name": "policy-static", "scheduler": {"policy": "static", "max_num_seqs": 4}}
    for name, data in (("a.yaml", static), ("b.yaml", cont)):
        (tmp_path / name).write_text(yaml.safe_dump(data))
    out = tmp_path / "cmp"
    code, text = run_cli(capsys, "compare", tmp_path / "a.yaml", tmp_path / "b.yaml", "--out", out, "--jobs", "1")
    assert code == 0
    assert "★ policy-continuous" in text and "★ policy-static" not in text
    summary = pd.read_csv(out / "summary.csv")
    assert summary.set_index("scenario")["winner"].to_dict() == {"policy-static": False, "policy-continuous": True}
    page = (out / "report.html").read_text()
    assert "★ policy-continuous: the cheapest per hour" in page
    entries = load_entries([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")], {}, True)
    for e, att in zip(entries, (0.1, 1.0), strict=True):
        e.record = {**_record(att), "requests": pd.read_parquet(out / f"requests-{e.name}.parquet"), "itl": None}
    from sim.results.report import latency_cdfs

    limits = {e.name: {"ttft": 0.3, "tpot": 0.03} for e in entries}
    chart = latency_cdfs({e.name: e.record["requests"] for e in entries}, config_colors(limits), limits,
                         limit_ink=SLO_LINE["color"])
    shapes = chart.layout["shapes"]
    assert len(shapes) == 2 and {s["line"]["color"] for s in shapes} == {SLO_LINE["color"]}  # once each, neutral


def test_compare_bars_are_linear_and_colours_match_the_study_reports(tmp_path):
    entries = _entries(tmp_path, {**SMALL, "name": "policy-static"}, {**SMALL, "name": "policy-continuous"})
    entries[0].record = {"status": "ok", "summary": {"ttft_p99": 10.0, "slo_attainment": 0.1}}
    entries[1].record = {"status": "ok", "summary": {"ttft_p99": 0.01, "slo_attainment": 1.0}}
    fig = summary_bars(summary_frame(entries), config_colors(e.name for e in entries), "policy-continuous")
    layout = fig.to_plotly_json()["layout"]
    assert all(v.get("type") in (None, "linear") for k, v in layout.items() if k.startswith("yaxis"))
    bar = fig.data[0]
    study = config_colors(["policy=continuous", "policy=static"])
    assert list(bar.marker.color) == [study["policy=static"], study["policy=continuous"]]
    assert bar.text[1].startswith("★") and list(bar.marker.line.width) == [0, 3]


def test_each_comparison_gets_a_new_folder_unless_out_names_one(tmp_path, capsys, monkeypatch):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(yaml.safe_dump({**SMALL, "name": name[0], "workload": {
            **SMALL["workload"], "num_requests": 20}}))
    monkeypatch.chdir(tmp_path)
    for n in (1, 2):
        code, text = run_cli(capsys, "compare", "a.yaml", "b.yaml", "--jobs", "1")
        assert code == 0 and f"results in {tmp_path / 'results' / f'compare-{n}'} " in text
    assert (tmp_path / "results" / "compare-1" / "report.html").is_file()
    code, text = run_cli(capsys, "compare", "a.yaml", "b.yaml", "--jobs", "1", "--out", "mine")
    assert code == 0 and f"results in {tmp_path / 'mine'} " in text
    assert not (tmp_path / "results" / "compare-3").exists()


def test_write_compare_alone_picks_its_winner(tmp_path):
    entries = _entries(tmp_path, {**SMALL, "name": "x"}, {**SMALL, "name": "y"})
    for e in entries:
        e.record = {"status": "error", "error": "boom"}
    write_compare(entries, tmp_path / "o", png=False)
    assert "no winner: no scenario ran" in (tmp_path / "o" / "report.html").read_text()


def test_study_and_compare_say_which_card_an_ambiguous_gpu_name_means(tmp_path, capsys):
    from .helpers import write_study

    small = {**SMALL, "workload": {**SMALL["workload"], "num_requests": 20}}
    path = write_study(tmp_path, {"vary": {"grid": {"hardware.gpu": ["H100", "A100-80GB"]}},
                                  "objective": {"kind": "cheapest", "rate": None}}, small)
    code, text = run_cli(capsys, "study", path, "--out", tmp_path / "st", "--jobs", "1")
    assert code == 0 and "H100 read as H100-SXM; write H100-PCIe or H100-NVL" in text
    assert "H100 read as H100-SXM" in (tmp_path / "st" / "report.html").read_text()
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({**small, "name": "h", "hardware": {"gpu": "H100"}}))
    code, text = run_cli(capsys, "compare", tmp_path / "h.yaml", tmp_path / "base.yaml", "--out", tmp_path / "c",
                         "--jobs", "1")
    assert code == 0 and "H100 read as H100-SXM; write H100-PCIe or H100-NVL" in text
    assert "H100 read as H100-SXM" in (tmp_path / "c" / "report.html").read_text()
    assert set(pd.read_csv(tmp_path / "c" / "summary.csv")["gpu"]) == {"H100-SXM"}


def test_compare_as_data_carries_the_winner_and_nothing_else_on_stdout(tmp_path, capsys):
    import json

    from sim.cli.app import main

    small = {**SMALL, "workload": {**SMALL["workload"], "num_requests": 20}}
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**small, "name": name}))
    assert main(["compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), "--out", str(tmp_path / "c"),
                 "--jobs", "1", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)  # stdout is the data alone
    assert [r["winner"] for r in records] == [True, False]  # equal on every count: the first given
