"""``servesim plan``'s command line (the questions and the studies they become: ``planner``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli.console import positive_int
from sim.study import planner
from sim.study.cli import _runner_args, positive_number

SOURCE = "servesim plan"  # what a plan's messages name in place of a study file

EXAMPLES = """examples:
  servesim plan --model llama-3-70b --gpu H100 --rate 40 --slo ttft_p99=1s,tpot_p99=50ms
  servesim plan --model llama-3-8b --gpu H100,H200,A100 --rate 20 --slo ttft_p99=500ms,tpot_p99=50ms
  servesim plan --max-rate --model llama-3-8b --gpu H100 --policy continuous,chunked-prefill --slo ttft_p99=1s
  servesim plan --rate 20 --pd 1:3,2:2,3:1 --scenario scenarios/disaggregated.yaml --slo ttft_p99=1s,tpot_p99=25ms
"""


def _positive_float(text: str) -> float:
    return positive_number(text)


def register(sub) -> None:
    p = sub.add_parser("plan", help="answer a planner's question in one command: the cheapest configuration "
                       "for a rate under an SLO, or the highest rate a configuration sustains",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    q = p.add_argument_group("the question")
    q.add_argument("--rate", type=_positive_float, default=None, metavar="REQ_PER_S",
                   help="the traffic to plan for: the cheapest configuration that meets the SLO at this rate")
    q.add_argument("--max-rate", action="store_true",
                   help="instead: the highest rate each configuration sustains under the SLO")
    q.add_argument("--slo", required=True, metavar="LIMITS",
                   help="e.g. ttft_p99=1s,tpot_p99=50ms (bounds on the run's percentiles; each request is held "
                        "to them too), ttft=500ms (per request only), attainment=95%% (share of requests that "
                        "must meet the per-request limits; default 90%%)")
    q.add_argument("--by", default=None, choices=[*planner.BY, "max_rate", "max_rate_per_gpu",
                                                  "max_rate_per_dollar"],
                   help="what the answer minimises or maximises (default: cost_per_1m_tokens for a rate; "
                        "max_rate, or cost_per_1m_tokens with several GPUs, for --max-rate)")
    w = p.add_argument_group("what to try (comma-separated lists; several values are compared)")
    w.add_argument("--scenario", default=None, metavar="FILE",
                   help="start from this scenario (default: the embedded default, Llama-3-8B on an H100)")
    w.add_argument("--model", default=None, help="model name (servesim list models)")
    w.add_argument("--gpu", default=None, metavar="A,B", help="GPU(s), e.g. H100 or H100,H200,A100")
    w.add_argument("--tp", default=None, metavar="1,2,4,8",
                   help="tensor-parallel degrees (default for a rate: 1,2,4,8; those that do not fit are skipped)")
    w.add_argument("--replicas", default=None, metavar="1-8",
                   help="replica counts (1,2,4 or 1-8); default for a rate: sized from what one replica sustains")
    w.add_argument("--pd", default=None, metavar="P:D,...",
                   help="prefill:decode replica splits of a disaggregated scenario, e.g. 1:3,2:2,3:1")
    w.add_argument("--policy", default=None, metavar="P,Q", help="scheduling policies, e.g. continuous,chunked-prefill")
    w.add_argument("--engine", default=None, metavar="E,F", help="engine presets, e.g. vllm,sglang")
    w.add_argument("--trace", default=None, metavar="FILE",
                   help="replay this trace (Azure format; --set workload.trace.format=... for others); "
                        "--rate rescales it")
    t = p.add_argument_group("how much to run")
    t.add_argument("--seeds", type=positive_int, default=None, metavar="N",
                   help=f"seeds per configuration and rate (default {planner.DEFAULT_SEEDS}): intervals")
    t.add_argument("--duration", type=_positive_float, default=planner.DEFAULT_DURATION_S, metavar="S",
                   help=f"seconds of arrivals per run (default {planner.DEFAULT_DURATION_S:g})")
    t.add_argument("--requests", type=positive_int, default=None, metavar="N",
                   help="requests per run instead of --duration")
    t.add_argument("--bracket", default=None, metavar="LO,HI",
                   help="--max-rate: the lowest and highest rate to try (default 0.5,128; with --rate R: R/8,8R)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a scenario field in every configuration")
    p.add_argument("--name", default=None, help="the study's name (default: plan-<rate>rps or plan-max-rate)")
    p.add_argument("--out", default=None, help="output folder (default: results/<name>)")
    p.add_argument("--fresh", action="store_true", help="ignore runs already in the output folder (default: resume)")
    p.add_argument("--yes", "-y", action="store_true", help="go ahead with a large plan without asking")
    p.add_argument("--max-runs", type=positive_int, default=None, metavar="N",
                   help="go ahead without asking only if the plan needs at most N runs")
    _runner_args(p)
    p.set_defaults(func=cmd_plan, retry_failed=False)


def cmd_plan(args) -> int:
    from sim.cli.console import console, err_console
    from sim.results.atomic import check_out_dir
    from sim.study.cli import (
        _ask_if_large,
        _check_runner_args,
        print_answer,
        print_study_data,
        run_plan,
        study_ending,
    )
    from sim.study.plan import plan_study
    from sim.study.report import STUDY_FILES

    req = planner.make_request(args)
    _check_runner_args(args, args.png)
    out = check_out_dir(args.out or Path("results") / req.name, "--out", STUDY_FILES)
    data = args.format != "table"
    say = err_console if data else console
    cases = None
    if req.sizing:
        sizing = planner.load(planner.sizing_dict(req), SOURCE)
        splan = plan_study(sizing, SOURCE)
        sout = check_out_dir(out / "sizing", "--out", STUDY_FILES)
        _ask_if_large(splan, args, sout, err_console)
        srun, _ = run_plan(splan, args, sout, err_console)
        if srun.interrupted:
            return study_ending(srun, [], sout, say, err_console)
        cases = planner.sized_cases(srun, req)
        say.print(planner.sizing_text(srun, req), highlight=False, markup=False)
        if not cases:
            err_console.print(f"[red]no configuration sustains {req.bracket[0]:g} req/s on one replica[/] "
                              f"(sizing results in {sout.resolve()}); try more GPUs per replica (--tp), "
                              "another GPU or a looser --slo", highlight=False)
            return 1
    for round_ in range(planner.MAX_ROUNDS + 1):
        doc = planner.study_dict(req, {} if cases is not None else None, cases)
        plan = plan_study(planner.load(doc, SOURCE), SOURCE)
        if round_ == 0:
            _ask_if_large(plan, args, out, err_console)
        run, paths = run_plan(plan, args, out, err_console)
        args.fresh = False  # (--fresh: the first round only; later rounds build on its runs)
        more = planner.more_cases(run, cases) if cases is not None and not run.interrupted else []
        if not more:
            break
        say.print("also trying " + ", ".join(c["name"] for c in more) + " (the fewest replicas that meet the SLO "
                  "must be bracketed by runs)", highlight=False, markup=False)
        cases = [*cases, *more]
    planner.write_plan_file(doc, out)
    if data:
        print_study_data(run, args.format)
    else:
        print_answer(run, console)
        console.print(planner.answer_text(run, req), highlight=False, markup=False)
    return study_ending(run, [*paths, planner.PLAN_FILE], out, say, err_console)
