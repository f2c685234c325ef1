"""Numbers as a capacity planner reads them: latencies in ms, shares in %, no scientific
notation, thousands separated, a missing value as a dash. Terminal and HTML use the same."""

from __future__ import annotations

import math

DASH = "–"


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def num(v, digits: int = 3) -> str:
    """A plain number to about ``digits`` significant digits, never in scientific notation:
    0.0412, 4.12, 41.2, 412, 4,121, 45,210."""
    if missing(v):
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) or (float(v).is_integer() and abs(v) >= 1):
        return f"{int(v):,}"
    v = float(v)
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    if decimals == 0:
        return f"{v:,.0f}"
    return f"{v:,.{decimals}f}"


def ms(seconds) -> str:
    """A latency given in seconds, written in milliseconds: 0.0123 → "12.3"."""
    return DASH if missing(seconds) else num(float(seconds) * 1e3)


def duration(seconds) -> str:
    """A latency with its unit: "12.3 ms" below a second, "1.23 s" above."""
    if missing(seconds):
        return DASH
    s = float(seconds)
    return f"{num(s * 1e3)} ms" if abs(s) < 1 else f"{num(s)} s"


def pct(share, decimals: int = 1) -> str:
    """A share in [0, 1] as a percentage, never rounded up to 100% (0.9996 → "99.9%")."""
    if missing(share):
        return DASH
    scale = 10**decimals
    v = math.floor(float(share) * 100 * scale + 1e-9) / scale
    return f"{v:.{decimals}f}%" if v != 100 else "100%"


def rate(v, unit: str = "req/s") -> str:
    return DASH if missing(v) else f"{num(v)} {unit}"


def count(v) -> str:
    return DASH if missing(v) else f"{int(v):,}"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def numeric(text: str) -> bool:
    """Whether a formatted cell is a number (right-aligned in tables): "1,234", "4.5%", "–"."""
    t = text.strip()
    return t == DASH or t.replace(",", "").replace(".", "").rstrip("%").lstrip("-").isdigit()
