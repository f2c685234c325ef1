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
    remove one an earlier run left."""
    if mode == "file":
        from plotly.offline import get_plotlyjs

        st.file(FILE).write_text(get_plotlyjs(), encoding="utf-8")
    else:
        st.remove(FILE)


def no_js_note() -> str:
    """Shown where plotly.js did not load (a report copied without plotly.min.js, or offline
    with ``cdn``); hidden by the page once the charts draw."""
    return ("<p id='no-plotly' class='warn'>The charts need plotly.js: keep <code>plotly.min.js</code> "
            "beside this page (or re-run with <code>--plotlyjs inline</code> for one self-contained "
            "file).</p><script>if (window.Plotly) document.getElementById('no-plotly').remove();</script>")
