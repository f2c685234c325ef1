"""``servesim study`` and ``servesim compare``: registered through sim.cli.commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.cli.console import positive_int
from sim.inputs import parse_value
from sim.study.schema import StudyError


def _parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        path, eq, raw = item.partition("=")
        path = path.strip()
        if not eq or not path or not all(path.split(".")):
            raise StudyError("--set", item, "expected field.path=value, e.g. scheduler.policy=static")
        out[path] = parse_value(raw, "--set", StudyError, path)
    return out


def _runner_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runner", "--executor", dest="runner", choices=["local", "ray"], default="local",
                   help="where runs go: local, a process pool on this machine (default); ray, Ray tasks")
    p.add_argument("--jobs", "-j", type=positive_int, default=None,
                   help="parallel runs, at least 1 (default: all cores; 1 runs in this process)")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join, e.g. ray://head:10001 or auto (default: start a "
                        "local Ray instance); only with --runner ray")
    p.add_argument("--png", action="store_true",
                   help="also write every figure as PNG under figures/ (kaleido + Chromium)")


def _check_runner_args(args) -> None:
    if args.address is not None and args.runner != "ray":
        raise StudyError("--address", None, "applies only to --runner ray")


def register(sub) -> None:
    st = sub.add_parser("study", help="run a study: sweeps, max sustainable rate, cheapest "
                        "configuration, latency–throughput curves")
    st.add_argument("study", help="study YAML")
    st.add_argument("--out", default=None, help="output folder (default: results/<study name>)")
    st.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a scenario field in every configuration")
    st.add_argument("--fresh", action="store_true",
                    help="ignore runs already in the output folder (default: resume)")
    st.add_argument("--retry-failed", action="store_true",
                    help="run again the runs that failed last time")
    st.add_argument("--dry-run", action="store_true",
                    help="validate and list the configurations, run nothing")
    _runner_args(st)
    st.set_defaults(func=cmd_study)

    cp = sub.add_parser("compare", help="run scenarios on the same traffic, side by side")
    cp.add_argument("scenarios", nargs="+", help="two or more scenario YAMLs")
    cp.add_argument("--out", default="results/compare", help="output folder")
    cp.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a field in every scenario")
    cp.add_argument("--own-traffic", action="store_true",
                    help="keep each scenario's own workload, seed and SLO (default: all use "
                         "the first scenario's)")
    _runner_args(cp)
    cp.set_defaults(func=cmd_compare)


def _progress_bar(console):
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[extra]}"), TimeElapsedColumn(), console=console,
                    disable=not console.is_terminal)


def cmd_study(args) -> int:
    from sim.cli.console import console, err_console
    from sim.results.atomic import check_out_dir
    from sim.study.driver import execute_plan
    from sim.study.plan import plan_study
    from sim.study.report import STUDY_FILES, write_outputs
    from sim.study.runners import make_runner
    from sim.study.schema import load_study
    from sim.study.store import RunStore

    _check_runner_args(args)
    study = load_study(args.study)
    plan = plan_study(study, args.study, _parse_sets(args.set))
    if args.dry_run:
        t = Table("#", "configuration", "GPUs", "USD/h", "note", title=f"{plan.name}: "
                  f"{len(plan.configs)} configurations, objective {study.objective.kind}")
        for c in plan.configs:
            t.add_row(str(c.index), c.label, str(c.num_gpus), f"{c.cost_per_hour:.2f}",
                      f"skipped: {c.skipped}" if c.skipped else "")
        console.print(t)
        return 0
    out = check_out_dir(args.out or Path("results") / plan.name, "--out", STUDY_FILES)
    # Everything is checked (the runner too) before the stored runs are read or, with
    # --fresh, dropped.
    with make_runner(args.runner, args.jobs, args.address) as ex, \
            _progress_bar(err_console) as bar:
        store = RunStore(out, fresh=args.fresh)
        if args.retry_failed:
            store.forget_errors()
        if store.records:
            err_console.print(f"resuming: {len(store.records)} runs already in {out / store.path.name}")
        task = bar.add_task(f"{plan.name} ({ex.workers} workers)", total=None, extra="")

        def show(p) -> None:
            bar.update(task, completed=p.done, total=p.total,
                       extra=f"{p.reused} reused, {p.failed} failed")

        run = execute_plan(plan, store, ex, show)
    paths = write_outputs(run, out, png=args.png)
    print_answer(run, console)
    for w in run.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"{run.progress.done} runs ({run.progress.reused} reused, "
                  f"{run.progress.failed} failed) in {run.wall_s:.1f} s; results in "
                  f"{out.resolve()} ({', '.join(paths)})")
    if run.interrupted:
        err_console.print("interrupted: finished runs are saved; run the same command again "
                          "to resume")
        return 130
    return 0


TERMINAL_SKIP = ("max_rate_per_dollar", "tpot_p99", "e2e_p99", "gpus")


def print_answer(run, console, limit: int = 20) -> None:
    """The configurations, best first, then the answer and its numbers."""
    from sim.study.report import _fmt, answer_columns, answer_lines, headers

    out = run.outcome
    cols = [c for c in answer_columns(run) if c in out.configs and c not in TERMINAL_SKIP]
    names = headers(run)
    t = Table(*(names.get(c, c) for c in cols), title=f"{run.plan.name}: {out.note}")
    best = out.best["config"] if out.best else None
    for _, row in out.configs.head(limit).iterrows():
        style = "bold green" if row["config"] == best else None
        t.add_row(*(_fmt(row[c]) for c in cols), style=style)
    console.print(t)
    if len(out.configs) > limit:
        console.print(f"… {len(out.configs) - limit} more configurations in configs.csv")
    if best is None:
        console.print("[red]no configuration qualifies[/]")
        return
    ans = Table(show_header=False, title=f"answer: {best}", title_style="bold green")
    for name, value in answer_lines(run):
        ans.add_row(name, value)
    console.print(ans)


def cmd_compare(args) -> int:
    import os

    from sim.cli.console import console, err_console
    from sim.results.atomic import check_out_dir
    from sim.study.compare import COMPARE_FILES, load_entries, run_entries, summary_frame, write_compare
    from sim.study.report import _fmt
    from sim.study.runners import make_runner

    _check_runner_args(args)
    entries = load_entries(args.scenarios, _parse_sets(args.set), not args.own_traffic)
    out = check_out_dir(args.out, "--out", COMPARE_FILES)
    jobs = args.jobs or min(len(entries), os.cpu_count() or 1)
    with make_runner(args.runner, jobs, args.address) as ex, \
            err_console.status(f"running {len(entries)} scenarios"):
        run_entries(entries, ex)
    paths, warnings = write_compare(entries, out, args.png)
    frame = summary_frame(entries)
    t = Table("", *frame["scenario"], title="compare")
    from sim.study.compare import TABLE_METRICS

    for m in ["status", *TABLE_METRICS]:
        if m in frame:
            t.add_row(m, *(_fmt(v) for v in frame[m]))
    console.print(t)
    for e in entries:
        if e.record.get("status") != "ok":
            console.print(f"[red]{e.name} failed:[/] {e.record.get('error')}")
    for w in warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"results in {out.resolve()} ({', '.join(paths)})")
    return 0 if all(e.record.get("status") == "ok" for e in entries) else 1
