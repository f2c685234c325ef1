"""What the command line prints: the consoles, a run's summary, where its files went."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True, soft_wrap=True)

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


def finish_run(result, out: str, fmt: str, verb: str) -> int:
    """Write a run's results, print its summary and where the files went."""
    from sim.results.write import write_results

    paths = write_results(result, out, fmt)
    print_summary(result)
    if result.loop == "compiled":
        from sim.loops.compiled import compiled_this_process

        if compiled_this_process():
            console.print("(this run compiled the simulation loop first; later runs load the cached build)")
    console.print(f"{verb} {len(result.requests)} requests in {result.wall_s:.2f} s wall; "
                  f"results in {Path(out).resolve()} ({', '.join(p.name for p in paths.values())})")
    return 0


