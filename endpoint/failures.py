"""What went wrong with a request, in one vocabulary for the load generator, calibration and
validation.

Each failed request carries an ``error`` of the form ``"KIND: what happened"``; the kinds
(``KINDS``) group failures in summaries and messages. A run that had failures is still
written whole (every request, its error beside it); calibration and validation refuse to fit
or score on it (``ServerFailure``, exit 2) and say what the server did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sim.errors import InputError

KINDS = {
    "HTTP": "the server answered with an HTTP error status",
    "malformed event": "an event in the stream was not a JSON object of the OpenAI format",
    "ended early": "the stream ended before [DONE]",
    "no token": "the stream finished without a token",
    "server error": "the stream carried an error object",
    "connection": "the connection failed or was cut",
    "timeout": "no complete answer within the request timeout",
    "time limit": "the run's time limit ended it (or it was never sent)",
    "client": "the client could not handle the answer",
}


def error(kind: str, detail: str) -> str:
    """``"KIND: detail"``; an HTTP error reads ``"HTTP 500: body"``."""
    assert kind in KINDS, kind
    return (detail if kind == "HTTP" else f"{kind}: {detail}")[:300]


def kind_of(err: str) -> str:
    head = err.split(":", 1)[0]
    if head.startswith("HTTP "):
        return "HTTP"
    return head if head in KINDS else "client"


def failure_counts(errors: Iterable[str]) -> dict:
    """``{"failed": n, "reasons": {kind: n}, "examples": {kind: first error}}`` of the
    non-empty ``errors``."""
    errs = [e for e in errors if e]
    counts = Counter(kind_of(e) for e in errs)
    examples: dict[str, str] = {}
    for e in errs:
        examples.setdefault(kind_of(e), e)
    return {"failed": len(errs), "reasons": dict(counts.most_common()), "examples": examples}


def describe(errors: Iterable[str], total: int | None = None) -> str:
    """One line: how many requests failed and why (each kind's count and first message)."""
    c = failure_counts(errors)
    of = f" of {total}" if total is not None else ""
    parts = [f"{n} {k} (e.g. {c['examples'][k]})" for k, n in c["reasons"].items()]
    return f"{c['failed']}{of} request(s) failed: " + "; ".join(parts)


class ServerFailure(InputError):
    """The server failed requests that a measurement needs: nothing is fitted or scored."""

    def __init__(self, url: str, what: str, errors: Iterable[str], total: int | None = None,
                 kept: str | None = None):
        msg = f"{what}: {describe(errors, total)}"
        if kept:
            msg += f"; {kept}"
        super().__init__("--endpoint", url, msg)


def check(url: str, what: str, records, kept: str | None = None) -> None:
    """Refuse (``ServerFailure``) if any of ``records`` failed."""
    errs = [r.error for r in records if r.error]
    if errs:
        raise ServerFailure(url, what, errs, len(records), kept)
