"""How a report gets plotly.js (4.6 MB): once per output folder, not once per page.

- ``file`` (default): ``plotly.min.js`` is written beside ``report.html`` with the folder's other
  files, and the page loads it by relative path: the folder opens offline, anywhere it is
  copied whole.
- ``cdn``: the page loads plotly.js from cdn.plot.ly (the smallest folder; needs the internet
  when opened).
- ``inline``: plotly.js inside the page (one self-contained file of about 5 MB).
"""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

MODES = ("file", "cdn", "inline")
FILE = "plotly.min.js"
HELP = ("how report.html gets plotly.js: file (plotly.min.js beside it, opens offline; default), cdn (loaded "
        "from cdn.plot.ly, needs the internet) or inline (inside the page, a self-contained 5 MB file)")


def script_tag(mode: str) -> str:
    """The <script> that loads plotly.js for a page written with ``mode``."""
    if mode == "file":
        return f"<script src='{FILE}' charset='utf-8'></script>"
    if mode == "cdn":
        from plotly.offline import get_plotlyjs_version

        url = f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"
        return f"<script src='{html.escape(url)}' charset='utf-8'></script>"
    if mode == "inline":
        from plotly.offline import get_plotlyjs

        return f"<script type='text/javascript'>{get_plotlyjs()}</script>"
    raise ValueError(f"plotly.js mode {mode!r}: expected one of {', '.join(MODES)}")


def stage(st, mode: str) -> None:
    """Put plotly.min.js into a ``Staging`` folder when the page loads it from there; otherwise
    remove one an earlier run left. Where it can, the file is a hard link to one copy in the
    user's cache, so a hundred result folders hold plotly.js once on disk (copying a folder
    still copies the file)."""
    if mode != "file":
        st.remove(FILE)
        return
    tmp = st.file(FILE)
    shared = _cached_copy()
    if shared is not None:
        try:
            tmp.unlink()
            os.link(shared, tmp)
            return
        except OSError:  # another file system, no hard links: a copy of its own
            pass
    from plotly.offline import get_plotlyjs

    tmp.write_text(get_plotlyjs(), encoding="utf-8")


def _cached_copy() -> Path | None:
    """plotly.js of this plotly version in the user's cache (written once, atomically)."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "servesim"
    path = root / f"plotly-{get_plotlyjs_version()}.min.js"
    if path.is_file():
        return path
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plotly-", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(get_plotlyjs())
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def no_js_note() -> str:
    """Shown where plotly.js did not load (a report copied without plotly.min.js, or offline
    with ``cdn``); hidden by the page once the charts draw."""
    return ("<p id='no-plotly' class='warn'>The charts need plotly.js: keep <code>plotly.min.js</code> "
            "beside this page (or re-run with <code>--plotlyjs inline</code> for one self-contained "
            "file).</p><script>if (window.Plotly) document.getElementById('no-plotly').remove();</script>")
