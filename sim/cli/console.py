"""What the command line prints: the consoles, a run's summary, where its files went."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sim.results.fmt import numeric

console = Console()
console.soft_wrap = not console.is_terminal  # piped: long lines stay whole
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


def print_summary(result) -> None:
    """What was simulated, then the summary's tables (sim.results.summary_view): rich tables on
    a terminal, plain aligned text when piped."""
    from sim.results.summary_view import Block, summary_blocks

    setup, blocks = summary_blocks(result)
    title = f"{result.scenario.name} ({result.mode})"
    for b in [Block(title, [list(r) for r in setup]), *blocks]:
        print_block(b)
    console.print("Latencies as vllm bench serve defines them (README, \"Reading the results\").", style="dim")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def print_block(b) -> None:
    """One summary table (a ``summary_view.Block``): a table with headers, or key/value rows."""
    if not console.is_terminal:
        print(b.title)
        print_plain(b.headers, b.rows, indent="  ", right=bool(b.headers))
        return
    from rich import box

    if b.headers:
        t = Table(*b.headers, title=b.title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False)
        for i, col in enumerate(t.columns):
            col.no_wrap = True
            if i and b.rows and all(numeric(r[i]) for r in b.rows):
                col.justify = "right"
    else:
        t = Table(title=b.title, title_justify="left", title_style="bold", show_header=False, box=None,
                  padding=(0, 1), pad_edge=False)
        t.add_column(style="dim", no_wrap=True)
        t.add_column(overflow="fold")
    for r in b.rows:
        t.add_row(*r)
    console.print(t)


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


def finish_run(result, out: str, fmt: str, verb: str, workload=None, plotly: str = "file") -> int:
    """Write a run's results, print its summary and where the files went. Exit code 0, or
    ``ALL_REJECTED`` when every request was rejected (the results are written all the same)."""
    from sim.results.write import write_results

    paths = write_results(result, out, fmt, workload, plotly)
    print_summary(result)
    if result.loop == "compiled":
        from sim.loops.compiled import compiled_this_process

        if compiled_this_process():
            console.print("(this run compiled the simulation loop first; later runs load the cached build)")
    elif result.loop == "interpreted":
        from sim.cli import prebuild

        console.print("(the core ran as plain Python: numba is not installed, SERVESIM_JIT=0, or no folder to keep "
                      "its build in)" if not prebuild.first_run
                      else "(first run of this version of the core: it ran as plain Python while the compiled "
                      "build is made in the background; later runs load it)")
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
    (nothing cut), CSV, or JSON (a list of objects keyed by the headings)."""
    headers = [str(c.header) for c in table.columns]
    if fmt == "json":
        import json

        print(json.dumps([dict(zip(headers, r, strict=True)) for r in rows], indent=2, ensure_ascii=False))
        return
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
    if table.title:
        print(table.title)
    print_plain(headers, rows)


def print_plain(headers: list[str], rows: list[list[str]], indent: str = "", right: bool = False) -> None:
    """Aligned columns of plain text, nothing cut (what a pipe or a file gets). ``right``
    right-aligns every column after the first (numbers)."""
    ncol = len(headers) or (len(rows[0]) if rows else 0)
    lines = ([headers] if headers else []) + rows
    widths = [max(len(r[i]) for r in lines) for i in range(ncol)]

    def line(r):
        cells = [v.rjust(w) if right and i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))]
        return (indent + "  ".join(cells)).rstrip()

    for r in lines:
        print(line(r))
