"""The compiled core's build cache can never stop a run: an unwritable cache falls back to another
folder or to plain Python (saying so), and a broken cache entry is compiled again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sim.core import buildcache

REPO = Path(__file__).resolve().parents[3]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", buildcache.JIT_ENV, buildcache.NOTED_ENV)}
    return {**env, "PYTHONPATH": str(REPO), "SERVESIM_BACKGROUND_BUILD": "0", **extra}


def test_an_unwritable_folder_falls_back_to_the_next_and_says_how_to_choose(tmp_path):
    (tmp_path / "file").write_text("x")  # a folder under a file cannot be made, even by root
    bad, good = tmp_path / "file" / "cache", tmp_path / "ok"
    folder, line = buildcache.choose_folder([bad, good])
    assert folder == good and good.is_dir()
    assert str(bad) in line and str(good) in line and "NUMBA_CACHE_DIR" in line
    assert buildcache.choose_folder([good]) == (good, None)  # the first one works: nothing to say
    folder, line = buildcache.choose_folder([bad])
    assert folder is None and "plain Python" in line and "NUMBA_CACHE_DIR" in line


def test_the_compiled_core_is_cached_in_the_fallback_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "tmp").mkdir()
    code = ("from sim.core import jit, plan; from pathlib import Path; "
            "f = plan.shape_into.py_func; loc = jit.CoreBuildLocator.from_function(f, f.__code__.co_filename); "
            "print(loc.get_cache_path())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                       env=_env(XDG_CACHE_HOME=str(tmp_path / "file" / "cache"), TMPDIR=str(tmp_path / "tmp")))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith(str(tmp_path / "tmp" / f"servesim-{os.getuid()}")), p.stdout
    assert p.stderr.count("cannot write the compiled build") == 1, p.stderr


def test_with_no_writable_folder_a_run_goes_on_as_plain_python(tmp_path):
    (tmp_path / "file").write_text("x")
    nowhere = str(tmp_path / "file" / "x")
    out = tmp_path / "out"
    # A temporary folder that cannot be written either (tempfile would otherwise find /tmp).
    code = (f"import sys, tempfile; tempfile.tempdir = {nowhere!r}; from sim.cli.app import main; "
            f"sys.exit(main(['run', '--out', {str(out)!r}, '--set', 'workload.num_requests=30']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600,
                       env=_env(NUMBA_CACHE_DIR=nowhere, XDG_CACHE_HOME=nowhere, HOME=nowhere))
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "no folder to keep the compiled build" in p.stderr
    assert json.loads((out / "summary.json").read_text())["loop"] == "interpreted"


MODULE = """
from sim.core.jit import entry


@entry
def twice(x):
    return 2 * x
"""


def test_a_truncated_cache_entry_is_compiled_again(tmp_path):
    (tmp_path / "fn.py").write_text(MODULE)
    cache = tmp_path / "cache"
    env = _env(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=f"{REPO}{os.pathsep}{tmp_path}")
    call = [sys.executable, "-c", "import fn; print(fn.twice(21))"]
    first = subprocess.run(call, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert first.returncode == 0 and first.stdout.strip() == "42", first.stderr
    entries = sorted(cache.rglob("*.nb[ic]"))
    assert {p.suffix for p in entries} == {".nbi", ".nbc"}
    for kind in (".nbc", ".nbi"):  # a cut data file, then a cut index
        for p in entries:
            if p.exists() and p.suffix == kind:
                p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        again = subprocess.run(call, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert again.returncode == 0 and again.stdout.strip() == "42", again.stderr
        assert "Traceback" not in again.stderr and "was removed and is being compiled again" in again.stderr
        clean = subprocess.run(call, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert clean.returncode == 0 and clean.stderr == "", clean.stderr  # the rebuilt entry loads
        entries = sorted(cache.rglob("*.nb[ic]"))
