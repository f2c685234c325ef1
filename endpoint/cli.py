"""``servesim loadgen``: replay a scenario's requests against a server and write what it
measured. (``calibrate --endpoint`` and ``validate --endpoint`` live in ``endpoint.commands``,
behind the doors in ``calibration/cli.py``.)"""

from __future__ import annotations

from pathlib import Path

from sim.errors import InputError


def add_client_options(p, model_help: str = "served model name (default: the server's first)") -> None:
    p.add_argument("--model", default=None, help=model_help)
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json or model folder (default: the served model's folder, if local)")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="the OpenAI API to call: completions (/v1/completions, default) or chat "
                        "(/v1/chat/completions)")
    p.add_argument("--no-exact-output", action="store_true",
                   help="do not send ignore_eos / min_tokens (servers that reject them)")
    add_limit_options(p)


def add_limit_options(p) -> None:
    """``--request-timeout`` and ``--time-limit`` (loadgen, and calibrate / validate with
    ``--endpoint``)."""
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="the longest a request may take, send to [DONE]; then it is recorded as "
                        "timed out (default 600)")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="the longest the whole run may take; then requests in flight are cancelled "
                        "and recorded as such (default: none)")


def limits(args) -> tuple[float, float | None]:
    """``--request-timeout`` and ``--time-limit``, checked."""
    for flag, v in (("--request-timeout", args.request_timeout), ("--time-limit", args.time_limit)):
        if v is not None and not v > 0:
            raise InputError(flag, None, f"expected seconds > 0, got {v}")
    return args.request_timeout, args.time_limit


def cmd_loadgen(args) -> int:
    from endpoint.measure import check_url, measure, served_model
    from endpoint.records import itl_frame, requests_frame, write_run
    from endpoint.server_info import identity
    from sim.cli.console import console
    from sim.scenario.load import load_scenario

    timeout, time_limit = limits(args)
    url = check_url(args.endpoint)
    model = served_model(url, args.model)
    scenario = load_scenario(args.scenario, args.set)
    source = args.scenario or "<default scenario>"
    p, result = measure(scenario, url, model, tokenizer=args.tokenizer, api=args.api,
                        exact=not args.no_exact_output, source=source, progress=not args.no_progress,
                        request_timeout=timeout, time_limit=time_limit)
    req = requests_frame(result, scenario.slo, p.workload.class_names,
                         p.workload.class_id)
    itl = itl_frame(result)
    meta = {"scenario": scenario.name, "endpoint": url, "model": model, "api": args.api,
            "server": identity(url), "start_unix": result.start_wall}
    paths = write_run(args.out, result, req, itl, meta)
    print_run(console, req, itl, result)
    console.print(f"results in {Path(args.out).resolve()} ({', '.join(p.name for p in paths.values())})")
    return 0 if (req["status"] == "finished").all() else 1


def print_run(console, req, itl, result) -> None:
    from rich.markup import escape

    from endpoint.failures import describe
    from endpoint.records import bench_metrics

    b = bench_metrics(req, itl, result.duration_s)
    bad = int((req["status"] != "finished").sum())
    console.print(f"{b['completed']} requests in {b['duration_s']:.1f} s ({result.mode} loop), "
                  f"{bad} failed: {b['request_throughput']:.2f} req/s, {b['output_throughput']:.1f} tok/s out")
    for m in ("ttft", "tpot", "itl", "e2el"):
        if f"median_{m}_ms" in b:
            console.print(f"  {m.upper():5} mean {b[f'mean_{m}_ms']:8.1f} ms  median {b[f'median_{m}_ms']:8.1f} ms"
                          f"  p99 {b[f'p99_{m}_ms']:8.1f} ms")
    c = result.client
    lag = f"send lag p99 {c['send_lag_p99_ms']:.2f} ms, " if "send_lag_p99_ms" in c else ""
    console.print(f"  client: {lag}event-loop lag p99 {c['loop_lag_p99_ms']:.2f} ms, "
                  f"CPU {c['cpu_per_chunk_us']:.0f} µs per chunk")
    if bad:
        head = "no request finished" if bad == len(req) else "failed"
        console.print(f"[red]{head}:[/] {escape(describe(req['error'], len(req)))}")
    retried = sum(r.retries for r in result.records)
    if retried:
        console.print(f"  {retried} request(s) sent again on a new connection (the server had closed "
                      "the kept-alive one)")


def register(sub) -> None:
    p = sub.add_parser("loadgen", help="replay a scenario's requests against an OpenAI-compatible "
                       "server; write requests.parquet, itl.parquet, summary.json")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the embedded default)")
    p.add_argument("--endpoint", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    add_client_options(p)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--out", default="results-loadgen")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_loadgen)
