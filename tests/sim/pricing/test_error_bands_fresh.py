"""The shipped error bands (sim/scenario/data/error_bands.yaml) are what the published benchmark
gives now. Every held-out case must have its row, with the keys it is matched on; the errors are
scored again for the first held-out case of each source (every source's engine, GPU and model
kind; the whole half takes about 35 s under the tests' bounds checks), so a change to the
roofline, a preset or the cases that moves an error cannot leave the bands stale."""

from __future__ import annotations

from benchmarks import published
from sim.pricing import trust

RERUN = "the error bands are stale: run python benchmarks/published.py --write-bands"


def shipped() -> dict[str, list]:
    return {r["id"]: [r[k] for k in published.BAND_COLUMNS] for r in trust.table()["cases"]}


def held_out() -> list[published.Case]:
    return [c for c in published.load_cases() if c.split == "holdout"]


def test_every_held_out_case_has_its_row_with_the_keys_it_is_matched_on():
    now = {c.id: published.band_keys(c) for c in held_out()}
    rows = shipped()
    assert sorted(now) == sorted(rows), f"held-out cases added or removed; {RERUN}"
    changed = [f"{i}: shipped {rows[i][1:-1]}, now {now[i][1:]}" for i in sorted(now) if rows[i][:-1] != now[i]]
    assert not changed, f"{RERUN}\n" + "\n".join(changed)


def test_the_summary_for_readers_is_that_of_the_cases():
    data = trust.table()
    assert data["summary"] == trust.summary_rows(data["cases"]), RERUN


def test_the_errors_are_the_benchmarks_now_first_case_of_each_source():
    first: dict[str, published.Case] = {}
    for c in sorted(held_out(), key=lambda c: c.id):
        first.setdefault(c.source, c)
    assert len(first) == len({c.source for c in published.load_cases()})
    rows = shipped()
    moved = [f"{c.id}: shipped {rows[c.id][-1]:+.4f}, now {c.error:+.4f}" for c in published.run(list(first.values()))
             if not abs(c.error - rows[c.id][-1]) <= 2e-4]
    assert not moved, f"{RERUN}\n" + "\n".join(moved)
