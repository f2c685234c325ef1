"""Placeholder-free hook: commands registered here as they land (execute, calibrate, ...)."""

from __future__ import annotations


def register(sub) -> None:
    return None
