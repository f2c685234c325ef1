"""Fixtures for the study tests."""

from __future__ import annotations

import shutil

import pytest


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    return path
