"""``servesim study`` and ``servesim compare``: registered through sim.cli.commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.cli.console import positive_int
from sim.inputs import parse_value
from sim.results import plotlyjs
from sim.study.estimate import ASK_RUNS, ASK_S
from sim.study.schema import StudyError

CONNECT_TIMEOUT_S = 30.0  # default wait for a Ray cluster at --address


def positive_number(text: str, what: str = "number") -> float:
    """An argparse type: a positive, finite number."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    return positive_number(text, "number of seconds")


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
    p.add_argument("--connect-timeout", type=_positive_seconds, default=CONNECT_TIMEOUT_S, metavar="SECONDS",
                   help=f"how long to wait for the Ray cluster at --address to answer (default {CONNECT_TIMEOUT_S:g})")
    p.add_argument("--allow-profile-mismatch", action="store_true",
                   help="price with a cost profile measured on another GPU, model, dtype or engine than the "
                        "scenario's, with a warning (default: refuse)")
    p.add_argument("--png", action="store_true",
                   help="also write every figure as PNG under figures/ (needs kaleido and Chrome or Chromium; "
                        "without them the command stops before running anything)")
    p.add_argument("--plotlyjs", choices=plotlyjs.MODES, default="file", help=plotlyjs.HELP)
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="what goes to stdout: table (readable; plain rows when piped), csv or json (the "
                        "results as data, raw units: seconds, req/s; messages go to stderr)")


def _check_runner_args(args, png: bool = False) -> None:
    from sim.core.buildcache import interpreted

    if args.address is not None and args.runner != "ray":
        raise StudyError("--address", None, "applies only to --runner ray")
    interpreted()  # where the build goes, said here (once) rather than by workers that have no stderr
    if args.allow_profile_mismatch:
        from sim.pricing.profile_checks import allow_mismatch

        allow_mismatch()  # here and in the workers the runs go to
    if png:
        from sim.study.report import png_problem

        problem = png_problem()
        if problem:
            raise StudyError("--png", None, problem)


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
    st.add_argument("--seeds", type=positive_int, default=None, metavar="N",
                    help="run every configuration and rate on N seeds (the scenario's seed, seed+1, ...): "
                         "figures are means with 95%% intervals and the SLO is judged on the interval "
                         "(default: the study's seeds, else 1)")
    st.add_argument("--dry-run", action="store_true",
                    help="validate and list the configurations, run nothing")
    st.add_argument("--yes", "-y", action="store_true",
                    help=f"go ahead with a large study (over {ASK_RUNS:,} runs or {ASK_S / 3600:g} h estimated) "
                         "without asking")
    st.add_argument("--max-runs", type=positive_int, default=None, metavar="N",
                    help="go ahead without asking only if the study needs at most N runs; refuse otherwise")
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
    from sim.cli.console import console, err_console, print_rows
    from sim.results.atomic import check_out_dir
    from sim.study.plan import plan_study
    from sim.study.report import STUDY_FILES
    from sim.study.schema import load_study

    study = load_study(args.study)
    _check_runner_args(args, args.png or study.report.png)
    plan = plan_study(study, args.study, _parse_sets(args.set), args.seeds)
    if args.dry_run:
        t = Table("#", "configuration", "GPUs", "$/h", "note", title=f"{plan.name}: "
                  f"{len(plan.configs)} configurations on {plan.seeds} seed(s), objective {study.objective.kind}")
        rows = [[str(c.index), c.label, str(c.num_gpus), f"{c.cost_per_hour:.2f}",
                 f"skipped: {c.skipped}" if c.skipped else ""] for c in plan.configs]
        print_rows(t, rows, args.format)
        return 0
    data = args.format != "table"
    say = err_console if data else console  # with csv/json, stdout holds the data only
    out = check_out_dir(args.out or Path("results") / plan.name, "--out", STUDY_FILES)
    _ask_if_large(plan, args, out, err_console)
    run, paths = run_plan(plan, args, out, err_console)
    if data:
        print_study_data(run, args.format)
    else:
        print_answer(run, console)
    return study_ending(run, paths, out, say, err_console)


def run_plan(plan, args, out: Path, err_console):
    """Run a checked plan into ``out`` (resuming what is stored there) with a progress bar, and
    write its outputs; the StudyRun and the paths written."""
    from sim.study.driver import execute_plan
    from sim.study.report import write_outputs
    from sim.study.runners import make_runner
    from sim.study.store import RunStore

    # Everything is checked (the runner too) before the stored runs are read or, with
    # --fresh, dropped.
    with make_runner(args.runner, args.jobs, args.address, timeout=args.connect_timeout) as ex, \
            _progress_bar(err_console) as bar:
        store = RunStore(out, fresh=args.fresh)
        if store.torn_lines:
            err_console.print(f"[yellow]warning:[/] {escape(str(store.path))}: {store.torn_lines} torn line(s) "
                              "(cut short by a crash or a full disk) dropped; their runs run again", highlight=False)
        if args.retry_failed:
            store.forget_errors()
        if store.records:
            err_console.print(f"resuming: {len(store.records)} runs already in {out / store.path.name}")
        task = bar.add_task(f"{plan.name} ({ex.workers} workers)", total=None, extra="")

        def show(p) -> None:
            bar.update(task, completed=p.done, total=p.total,
                       extra=f"{p.reused} reused, {p.failed} failed")

        run = execute_plan(plan, store, ex, show)
    return run, write_outputs(run, out, png=args.png, plotly=args.plotlyjs)


def study_ending(run, paths, out: Path, say, err_console) -> int:
    """Warnings, the runs' count and where the results are; the exit code (130 interrupted,
    ALL_FAILED when every run failed)."""
    for w in run.warnings:
        say.print(f"[yellow]warning:[/] {escape(w)}")
    say.print(f"{run.progress.done} runs ({run.progress.reused} reused, "
              f"{run.progress.failed} failed) in {run.wall_s:.1f} s; results in "
              f"{out.resolve()} ({', '.join(paths)})", highlight=False)
    if run.interrupted:
        err_console.print("interrupted: finished runs are saved; run the same command again "
                          "to resume")
        return 130
    first = first_failure(run)
    if run.progress.done and run.progress.failed == run.progress.done and first is not None:
        err_console.print(f"[red]error:[/] every run failed ({run.progress.failed}); the first, "
                          f"{escape(first)}", highlight=False)
        return ALL_FAILED
    return 0


ALL_FAILED = 1  # exit code of a study whose every run failed


def first_failure(run) -> str | None:
    """The first failed run's configuration and error, in the plan's order (None if none failed)."""
    for s in sorted(run.searches, key=lambda s: s.config):
        for rate, rec in s.records.items():
            if rec.get("status") != "ok":
                at = "" if rate is None else f" at rate {rate:g}"
                return f"[{run.plan.configs[s.config].label}]{at}: {rec.get('error')}"
    return None


def _ask_if_large(plan, args, out: Path, err_console) -> None:
    """Print the study's size; a large one needs --yes (a terminal is asked) or a --max-runs it
    fits in (``estimate``)."""
    import os
    import sys

    from sim.study.estimate import estimate, refusal
    from sim.study.store import RunStore

    workers = 1 if args.runner == "local" and args.jobs == 1 else args.jobs or os.cpu_count() or 1
    stored = 0 if args.fresh else len(RunStore.peek(out))
    est = estimate(plan, workers, stored)
    err_console.print(f"{plan.name}: {est.describe()}", highlight=False)
    why = None if args.yes else refusal(est, args.max_runs)
    if why is None:
        return
    if sys.stdin.isatty() and err_console.is_terminal:
        answer = err_console.input(f"{escape(why)}\ngo ahead? [y/N] ")
        if answer.strip().lower() in ("y", "yes"):
            return
    raise StudyError("--yes", None, why)


TERMINAL_SKIP = ("max_rate_per_dollar", "e2e_p99", "gpus")


def print_answer(run, console, limit: int = 20) -> None:
    """The configurations, best first (★ the answer), then the answer and its numbers: a rich
    table on a terminal, plain rows when piped."""
    from sim.cli.console import print_block, print_rows
    from sim.results.summary_view import Block
    from sim.study.columns import heading, row_cell
    from sim.study.report import answer_columns, answer_lines, headers, none_qualifies

    out = run.outcome
    names = headers(run)
    cols = [c for c in answer_columns(run) if c in out.configs and c not in TERMINAL_SKIP]
    best = out.best["config"] if out.best else None
    rows = []
    for _, row in out.configs.head(limit).iterrows():
        cells = [row_cell(row, c) for c in cols]
        cells[0] = ("★ " if row["config"] == best else "  ") + cells[0]
        rows.append(cells)
    print_rows(Table(*(heading(c, names) for c in cols), title=f"{run.plan.name}: {out.note}"), rows)
    if len(out.configs) > limit:
        console.print(f"… {len(out.configs) - limit} more configurations in configs.csv")
    if best is None:
        console.print(f"[red]no configuration qualifies[/] {escape(none_qualifies(out))}", highlight=False)
        return
    print_block(Block(f"answer: {best}", [[k, v] for k, v in answer_lines(run)]))


def _records(df) -> list[dict]:
    import json

    return json.loads(df.to_json(orient="records"))


def print_study_data(run, fmt: str) -> None:
    """The configurations as CSV (answer_columns, raw units), or the answer and every
    configuration as JSON."""
    import json
    import sys

    from sim.study.intervals import ms_table
    from sim.study.report import answer_columns

    out = run.outcome
    shown = [c for c in answer_columns(run) if c in out.configs and c != "config"]
    extra = [x for c in shown for x in (f"{c}_lo", f"{c}_hi") if x in out.configs]
    cols = ["config", *shown, *extra, *[c for c in ("capacity", "seeds") if c in out.configs and c not in shown]]
    if fmt == "csv":
        ms_table(out.configs[cols]).to_csv(sys.stdout, index=False)
        return
    best = _records(ms_table(out.configs[out.configs["config"] == out.best["config"]]))[0] if out.best else None
    print(json.dumps({"study": run.plan.name, "objective": run.plan.study.objective.kind, "seeds": out.seeds,
                      "note": out.note,
                      "best": best, "configs": _records(ms_table(out.configs[cols]))}, indent=2))


def cmd_compare(args) -> int:
    import os

    from sim.cli.console import console, err_console
    from sim.results.atomic import check_out_dir
    from sim.study.compare import COMPARE_FILES, load_entries, print_compare, run_entries, write_compare
    from sim.study.runners import make_runner

    _check_runner_args(args, args.png)
    entries = load_entries(args.scenarios, _parse_sets(args.set), not args.own_traffic)
    out = check_out_dir(args.out, "--out", COMPARE_FILES)
    jobs = args.jobs or min(len(entries), os.cpu_count() or 1)
    with make_runner(args.runner, jobs, args.address, timeout=args.connect_timeout) as ex, \
            err_console.status(f"running {len(entries)} scenarios"):
        run_entries(entries, ex)
    paths, warnings = write_compare(entries, out, args.png, args.plotlyjs)
    print_compare(entries, args.format)
    say = err_console if args.format != "table" else console
    for e in entries:
        if e.record.get("status") != "ok":
            say.print(f"[red]{escape(e.name)} failed:[/] {escape(str(e.record.get('error')))}")
    for w in warnings:
        say.print(f"[yellow]warning:[/] {escape(w)}")
    say.print(f"results in {out.resolve()} ({', '.join(paths)})", highlight=False)
    return 0 if all(e.record.get("status") == "ok" for e in entries) else 1
