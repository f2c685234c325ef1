"""User-facing input errors: they name the file, the field and what was expected."""

from __future__ import annotations


class InputError(Exception):
    """A problem with something the user gave us. The CLI prints it and exits with code 2."""

    def __init__(self, source: str, field: str | None, message: str):
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


class ScenarioError(InputError):
    pass


class TraceError(InputError):
    pass


class ProfileError(InputError):
    pass


class ModelConfigError(InputError):
    """A model's Hugging Face ``config.json`` that cannot describe a model."""


class OutputError(InputError):
    """An output location we cannot write to (a file where a folder should be, no permission)."""
