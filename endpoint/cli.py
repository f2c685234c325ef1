"""``servesim loadgen`` here; ``servesim calibrate --endpoint`` and ``servesim validate
--endpoint`` branch from ``calibration/cli.py`` into ``cmd_calibrate`` / ``cmd_validate``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from urllib.parse import urlparse

from sim.errors import InputError


def check_url(url: str) -> str:
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InputError("--endpoint", url, "expected a URL like http://127.0.0.1:8000")
    from endpoint.server_metrics import get

    if get(url, "/v1/models") is None:
        raise InputError("--endpoint", url, "no OpenAI-compatible server answers there "
                         "(GET /v1/models failed)")
    return url


def served_model(url: str, model: str | None) -> str:
    from endpoint.server_metrics import identity

    ids = [m["id"] for m in identity(url).get("models", []) if isinstance(m.get("id"), str)]
    if model is None:
        if not ids:
            raise InputError("--model", None, "the server lists no model; give --model")
        return ids[0]
    if ids and model not in ids:
        raise InputError("--model", model, f"the server serves {', '.join(ids)}")
    return model


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


@contextlib.contextmanager
def progress_bar(total: int, label: str, enabled: bool = True):
    from calibration.progress import ticker

    with ticker(enabled) as t:
        t.stage(label, total)
        yield t


def measure(scenario, url: str, model: str, *, tokenizer: str | None, api: str, exact: bool,
            source: str, progress: bool = True, label: str | None = None, seed: int | None = None,
            request_timeout: float = 600.0, time_limit: float | None = None):
    """Run the scenario's requests against the server; returns (plan, LoadResult). ``seed``:
    the prompts' words (default: the scenario's seed); lengths, arrivals and sharing stay."""
    from endpoint.loadgen import Options, run
    from endpoint.replay import check_fits, load_vocab, plan
    from endpoint.server_metrics import identity, published_int

    vocab = load_vocab(url, tokenizer)
    opts = Options(url=url, model=model, api=api, exact_output=exact, timeout_s=request_timeout)
    overhead = chat_overhead(opts) if api == "chat" else 0
    p = plan(scenario, vocab, api=api, chat_overhead=overhead, seed=seed)
    models = {m["id"]: m for m in identity(url).get("models", [])}
    check_fits(p, published_int(url, "max_model_len", (models.get(model) or {}).get("max_model_len")), source)
    with progress_bar(len(p.requests), label or scenario.name, progress) as bar:
        result = run(p.requests, opts, closed=p.closed, think_time_s=p.think_time_s,
                     on_done=lambda _r: bar.tick(), time_limit_s=time_limit)
    return p, result


def chat_overhead(opts) -> int:
    """Tokens the chat template adds around a one-word user message."""
    from endpoint.loadgen import Request, run

    probe = Request(0, 0.0, " hello", 1, 1)
    rec = run([probe], opts).records[0]
    if rec.error or rec.prompt_tokens is None:
        raise InputError("--api", "chat", f"a chat request failed: {rec.error or 'no usage in the stream'}")
    return max(int(rec.prompt_tokens) - 1, 0)


def cmd_loadgen(args) -> int:
    from endpoint.records import itl_frame, requests_frame, write_run
    from endpoint.server_metrics import identity
    from sim.cli.console import console
    from sim.scenario.schema import load_scenario

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


# -- servesim calibrate --endpoint ------------------------------------------------------------
def add_endpoint_options(p, what: str) -> None:
    """Options that ``calibrate`` / ``validate`` take with ``--endpoint`` (see calibration/cli.py)."""
    g = p.add_argument_group(f"{what} an OpenAI-compatible server (--endpoint)")
    g.add_argument("--endpoint", default=None, metavar="URL",
                   help=f"{what} this server instead of the in-repo engine, e.g. http://127.0.0.1:8000")
    g.add_argument("--served-model", default=None,
                   help="the server's model name (default: its first)")
    g.add_argument("--tokenizer", default=None,
                   help="tokenizer.json or model folder (default: the served model's folder, if local)")
    add_limit_options(g)


def sim_model_for(url: str, served: str, given: str | None):
    """The scenario ``model:`` of the served model: ``--model`` (catalog name or config.json),
    else the served model's local folder's config.json."""
    from endpoint.server_metrics import identity

    if given:
        p = Path(given)
        if p.suffix == ".json" or p.is_dir():
            return {"hf_config": str(p.resolve())}
        from sim.scenario.specs import get_model

        try:
            return get_model(given).name
        except KeyError as e:
            raise InputError("--model", given, e.args[0]) from None
    for m in identity(url).get("models", []):
        root = m.get("root")
        if m.get("id") == served and root and (Path(root) / "config.json").is_file():
            return {"hf_config": str(Path(root).resolve() / "config.json")}
    raise InputError("--model", None, "name the served model for the simulator (a catalog model or its "
                     "config.json): the server does not name a local model folder")


def cmd_calibrate(args) -> int:
    import yaml

    from endpoint.calibrate import Settings, calibrate, keep_partial, saturation_check
    from endpoint.probes import ProbeData
    from endpoint.records import write_text
    from endpoint.replay import load_vocab
    from sim.cli.console import console
    from sim.pricing.profile import save_profile

    timeout, time_limit = limits(args)
    url = check_url(args.endpoint)
    served = served_model(url, args.served_model)
    sim_model = sim_model_for(url, served, args.model)
    vocab = load_vocab(url, args.tokenizer)
    out = Path(args.out or "profile-endpoint.json")
    s = Settings(url=url, model=served, sim_model=sim_model, quick=args.quick, seed=args.seed,
                 progress=not args.no_progress, device_type="cpu" if args.device == "cpu" else "gpu",
                 request_timeout=timeout, time_limit=time_limit)
    data = ProbeData()
    try:
        profile, fragment, data = calibrate(s, vocab, data=data)
    except InputError as e:  # the server failed a probe, or time ran out: keep what was measured
        kept = keep_partial(data, out)
        raise InputError(e.source, e.field, f"{e.message}; no profile written, the measurements so far "
                         f"are in {kept}") from None
    path = save_profile(profile, out)
    frag_path = out.with_suffix(".scenario.yaml")
    fragment["cost"]["profile"] = out.name
    write_text(frag_path, "# scheduler inferred by servesim calibrate --endpoint; merge into a scenario\n"
               + yaml.safe_dump(fragment, sort_keys=False))
    sat = saturation_check(path, fragment, data, out.parent)
    grid = dict(profile.grid)
    grid["fit"] = {**grid["fit"], "saturation": sat}
    grid["phases_s"] = data.phases_s
    profile = profile.model_copy(update={"grid": grid})
    _save_atomic(profile, path)
    st = grid["fit"]["step"]
    console.print(f"calibrated {served} at {url} in {data.phases_s['total']:.0f} s; profile in {path}, "
                  f"scheduler in {frag_path}")
    console.print(f"fit on {st['n']} measurements: median error {st['median_abs_rel_error']:.1%} "
                  + ", ".join(f"{k} {st[k]['median_abs_rel_error']:.1%}" for k in ("ttft", "decode", "mixed")
                              if k in st))
    console.print(f"per-request overhead {profile.request_overhead_s * 1e3:.1f} ms; scheduler: "
                  f"{fragment['scheduler']}" + (f", {fragment['hardware']['kv_blocks']} KV blocks"
                                                if "hardware" in fragment else ""))
    console.print(f"saturation (closed loop of {sat['concurrency']}): measured {sat['measured_req_per_s']:.2f} "
                  f"req/s, simulated {sat['simulated_req_per_s']:.2f} ({sat['rel_diff']:+.1%})")
    for n in profile.notes:
        console.print(f"  note: {n}")
    return 0


def _save_atomic(profile, path: Path) -> Path:
    import json

    from endpoint.records import write_text

    return write_text(path, json.dumps(profile.model_dump(mode="json"), indent=1))


# -- servesim validate --endpoint -------------------------------------------------------------
def cmd_validate(args) -> int:
    from calibration.cli import parse_bounds, print_validation
    from calibration.compare import bounds_exceeded
    from endpoint.validate import validate
    from sim.cli.console import console
    from sim.scenario.schema import load_scenario

    bounds = parse_bounds(args.max_error)
    if args.repeats < 1:
        raise InputError("--repeats", None, f"expected a positive number, got {args.repeats}")
    timeout, time_limit = limits(args)
    url = check_url(args.endpoint)
    served = served_model(url, args.served_model)
    scenario = load_scenario(args.scenario, args.set)
    source = args.scenario or "<default scenario>"
    out = Path(args.out)
    v = validate(scenario, args.profile, url, served, source=source, tokenizer=args.tokenizer,
                 repeats=args.repeats, out=out, log=lambda m: console.print(m), request_timeout=timeout,
                 time_limit=time_limit)
    write_validation(v, out)
    print_validation(v, console)
    for d in v.diagnosis:
        console.print(f"  {d}")
    console.print(f"results in {out.resolve()} (validation.json, report.html, requests.csv, run*/)")
    failed = bounds_exceeded(v.errors, bounds)
    for f in failed:
        console.print(f"[red]FAIL:[/] {f}")
    return 1 if failed else 0


def write_validation(v, out: Path) -> None:
    from calibration.report import write_report
    from endpoint.records import write_json, write_text

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "validation.json", v.to_json())
    write_text(out / "requests.csv", v.joined.to_csv(index=False))
    tmp = out / ".report.html.tmp"
    write_report(v, tmp)
    tmp.replace(out / "report.html")
