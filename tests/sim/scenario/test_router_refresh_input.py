"""The routers' sampling (router.refresh_s, delay_s, add_routed) must mean something: a bad one is
refused with the file, the field and what was expected (exit 2), never run as something else."""

from __future__ import annotations

import pytest

from tests.sim.scenario.test_bad_input import GOOD, run_cli, write

CASES = [
    ("router: {policy: least-kv, refresh_s: -1}\n", ["router.refresh_s", "greater than or equal to 0"]),
    ("router: {policy: least-kv, refresh_s: .inf}\n", ["router.refresh_s", "finite"]),
    ("router: {policy: least-kv, refresh_s: 0.0001}\n", ["router.refresh_s", "0 (exact state) or at least 0.001"]),
    ("router: {policy: least-kv, refresh_s: 0, delay_s: 0.1}\n", ["router.delay_s", "needs sampled state"]),
    ("router: {policy: least-outstanding, delay_s: 0.1}\n", ["router.delay_s", "needs sampled state"]),
    ("router: {policy: least-outstanding, add_routed: true}\n", ["router.add_routed", "needs sampled state"]),
    ("router: {policy: round-robin, refresh_s: 1}\n", ["router.refresh_s", "round-robin reads no load signal"]),
    ("router: {policy: round-robin, add_routed: true}\n", ["router.add_routed", "round-robin"]),
    ("router: {policy: least-kv, refresh_s: 0.01, delay_s: 100}\n", ["router.delay_s", "at most 1000"]),
    ("router: {policy: least-kv, delay_s: -0.5}\n", ["router.delay_s", "greater than or equal to 0"]),
    ("router: {policy: least-kv, add_routed: maybe}\n", ["router.add_routed", "valid boolean"]),
    ("router: {policy: least-kv, refresh: 1}\n", ["router.refresh", "unknown field"]),
]


@pytest.mark.parametrize("text,fragments", CASES)
def test_bad_router_sampling_names_file_and_field(tmp_path, capsys, text, fragments):
    path = write(tmp_path, GOOD + text)
    code, out = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "Traceback" not in out and "s.yaml" in out
    for f in fragments:
        assert f in out, f"{f!r} not in {out!r}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("router", [
    {"policy": "least-kv"}, {"policy": "least-kv", "refresh_s": 0}, {"policy": "power-of-two", "refresh_s": 5},
    {"policy": "prefix-affinity", "refresh_s": 0.5, "delay_s": 2, "add_routed": False},
])
def test_meaningful_sampling_is_accepted(router):
    from tests.sim.helpers import scenario

    assert scenario(router=router).router.policy == router["policy"]
