"""What the command line prints: the consoles, a run's summary, where its files went."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (argparse then exits 2 naming the option)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


SUMMARY_ROWS = [
    ("requests", "{:d}"), ("finished", "{:d}"), ("rejected", "{:d}"),
    ("duration_s", "{:.2f} s"), ("request_throughput", "{:.2f} req/s"),
    ("output_token_throughput", "{:.0f} tok/s"),
    ("ttft_p50", "{:.3f} s"), ("ttft_p99", "{:.3f} s"),
    ("tpot_p50", "{:.4f} s"), ("tpot_p99", "{:.4f} s"),
    ("e2e_p50", "{:.3f} s"), ("e2e_p99", "{:.3f} s"),
    ("slo_attainment", "{:.1%}"), ("goodput", "{:.2f} req/s"), ("preemptions", "{:d}"),
    ("mean_batch_size", "{:.1f}"), ("mean_kv_utilization", "{:.1%}"),
]


def print_summary(result) -> None:
    s = result.summary
    table = Table(title=f"{result.scenario.name} ({result.mode})", show_header=False)
    for key, fmt in SUMMARY_ROWS:
        if key in s and s[key] == s[key]:  # skip NaN
            table.add_row(key, fmt.format(s[key]))
    console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}")


def progress_callback(total: int):
    """A rich progress bar over arrivals, shown only for long runs."""
    if total < 20_000 or not console.is_terminal:
        return None, None
    from rich.progress import Progress

    bar = Progress(transient=True, console=err_console)
    task = bar.add_task("simulating", total=total)
    step = max(1, total // 200)

    def on_arrival(rid: int) -> None:
        if rid % step == 0:
            bar.update(task, completed=rid)

    return bar, on_arrival


ALL_REJECTED = 3  # exit code of a run that finished with every request rejected


def finish_run(result, out: str, fmt: str, verb: str, workload=None) -> int:
    """Write a run's results, print its summary and where the files went. Exit code 0, or
    ``ALL_REJECTED`` when every request was rejected (the results are written all the same)."""
    from sim.results.write import write_results

    paths = write_results(result, out, fmt, workload)
    print_summary(result)
    if result.loop == "compiled":
        from sim.loops.compiled import compiled_this_process

        if compiled_this_process():
            console.print("(this run compiled the simulation loop first; later runs load the cached build)")
    console.print(f"{verb} {len(result.requests)} requests in {result.wall_s:.2f} s wall; "
                  f"results in {Path(out).resolve()} ({', '.join(p.name for p in paths.values())})")
    n, rejected = result.summary.get("requests", 0), result.summary.get("rejected", 0)
    if n and rejected == n:
        reasons = result.requests["reject_reason"].value_counts()
        why = "; ".join(f"{r} ({c})" for r, c in reasons.items())
        err_console.print(f"[red]error:[/] every request was rejected: {why}. Nothing was served; "
                          f"exit code {ALL_REJECTED}", highlight=False)
        return ALL_REJECTED
    return 0


def print_rows(table: Table, rows: list[list[str]], fmt: str = "table") -> None:
    """Rows under ``table``'s columns: a rich table on a terminal, plain aligned text when piped
    (nothing cut), or CSV."""
    headers = [str(c.header) for c in table.columns]
    if fmt == "csv":
        import csv
        import sys

        w = csv.writer(sys.stdout)
        w.writerow(headers)
        w.writerows(rows)
        return
    if console.is_terminal:
        for r in rows:
            table.add_row(*r)
        console.print(table)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
