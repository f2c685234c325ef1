"""Writing a run's results: requests and steps tables, summary.json, report.html (and plotly.min.js).

All of them are written under temporary names and renamed into place together (``atomic``), so a
folder holds one run's files only; tables of the other format left by an earlier run go.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sim.results import plotlyjs
from sim.results.atomic import Staging, check_out_dir
from sim.results.band_view import band_json
from sim.results.jsonsafe import json_safe as _clean
from sim.results.money import price_records
from sim.results.report import write_report

FORMATS = ("parquet", "csv")
TABLES = ("requests", "steps")


def result_names(fmt: str) -> list[str]:
    """The files a run writes in ``fmt``."""
    return [f"{t}.{fmt}" for t in TABLES] + ["summary.json", "report.html", plotlyjs.FILE]


def check_results_dir(out: str | Path, fmt: str = "parquet", field: str = "--out") -> Path:
    """Before simulating: can the run's results be written to ``out``?"""
    return check_out_dir(out, field, result_names(fmt))


def applied_config(scenario) -> dict:
    """The scenario as it ran: fields that a trace or ``classes`` made moot (the default
    arrival process and lengths, the default ``num_requests``) are left out."""
    data = scenario.model_dump(mode="json", exclude={"base_dir", "source"})
    w, wd = scenario.workload, data["workload"]
    streams = [(w, wd)] if w.classes is None else list(zip(w.classes, wd["classes"], strict=True))
    for spec, d in streams:
        if spec.trace is not None:
            for key in ("arrival", "prompt_len", "output_len"):
                d.pop(key, None)
        if spec.trace is not None and "num_requests" not in spec.model_fields_set:
            d.pop("num_requests", None)
    if w.classes is not None:
        for key in ("arrival", "prompt_len", "output_len"):
            wd.pop(key, None)
        if "num_requests" not in w.model_fields_set:
            wd.pop("num_requests", None)
    return data


def summary_document(result, workload=None) -> dict:
    """What summary.json holds."""
    doc = {
        "scenario": result.scenario.name,
        "mode": result.mode,
        "loop": result.loop,  # which simulation loop ran it (identical results either way)
        "wall_s": result.wall_s,
        "summary": _clean(result.summary),
        "warnings": result.warnings,
        "config": applied_config(result.scenario),
        "prices": price_records(result.scenario),  # each GPU's count, $/h, and the price's source and date
        "error_band": band_json(result),  # per metric: how far to trust it (sim.pricing.trust)
    }
    traces = list(getattr(workload, "traces", ()) or ())
    if traces:
        doc["traces"] = [_clean(t) for t in traces]  # the trace files replayed, as applied
    return doc


def write_results(result, out_dir: str | Path, fmt: str = "parquet", workload=None,
                  plotly: str = "file") -> dict[str, Path]:
    """Write everything a run produced into ``out_dir``; returns the paths written.
    ``workload`` (when given) records which trace files fed the run; ``plotly``: how the report
    gets plotly.js (``sim.results.plotlyjs``)."""
    paths: dict[str, Path] = {}
    with Staging(out_dir) as st, ThreadPoolExecutor(max_workers=len(TABLES)) as pool:
        writes = []  # the tables are written on threads (pyarrow and the CSV writer let go of the GIL)
        for name, frame in zip(TABLES, (result.requests, result.steps), strict=True):
            writes.append(pool.submit(_write_table, frame, st.file(f"{name}.{fmt}"), fmt))
            for other in FORMATS:
                if other != fmt:
                    st.remove(f"{name}.{other}")
            paths[name] = st.final(f"{name}.{fmt}")
        for other in FORMATS:  # an autoscaled fleet's changes (time, replica, state): sim.results.fleet
            if other != fmt or getattr(result, "fleet", None) is None:
                st.remove(f"fleet.{other}")
        if getattr(result, "fleet", None) is not None:
            writes.append(pool.submit(_write_table, result.fleet, st.file(f"fleet.{fmt}"), fmt))
            paths["fleet"] = st.final(f"fleet.{fmt}")
        for old in Path(out_dir).glob("seed-*"):  # an earlier run's on several seeds (--seeds)
            st.remove(old.name, folder=True)
        st.remove("seeds.csv")
        st.file("summary.json").write_text(json.dumps(summary_document(result, workload), indent=2))
        paths["summary"] = st.final("summary.json")
        write_report(result, st.file("report.html"), plotly)
        paths["report"] = st.final("report.html")
        plotlyjs.stage(st, plotly)
        if plotly == "file":
            paths["plotly"] = st.final(plotlyjs.FILE)
        for w in writes:
            w.result()  # a failed write raises here, inside the staging: nothing is renamed into place
    return paths


def _write_table(frame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        # labels repeat: a dictionary; counts and ids change by small steps: deltas; times and
        # durations: their bytes split by position (they compress, and read back four times
        # faster than plain). Each column this way writes faster than the default.
        encoding = {f.name: "DELTA_BINARY_PACKED" if pa.types.is_integer(f.type) else "BYTE_STREAM_SPLIT"
                    for f in table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)}
        labels = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        pq.write_table(table, path, use_dictionary=labels, column_encoding=encoding)
    else:
        frame.to_csv(path, index=False)
