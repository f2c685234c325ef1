"""Fixtures for the study tests (the browser fixture lives in tests/conftest.py)."""
