"""``servesim calibrate --endpoint`` and ``servesim validate --endpoint``: against an
OpenAI-compatible server.

Reached through the doors in ``calibration/cli.py``, which have checked what both sides
share (``--max-error``, ``--repeats``, the profile and output paths).
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import InputError


def add_endpoint_options(p, what: str) -> None:
    """The options ``calibrate`` / ``validate`` take with ``--endpoint``."""
    from endpoint.cli import add_limit_options

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
    from endpoint.server_info import identity

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


def calibrate_endpoint(args) -> int:
    """Probe the server, fit a profile, infer its scheduler; write the profile to ``--out``
    (default ``profile-endpoint.json``) and the scheduler beside it (``.scenario.yaml``)."""
    import yaml

    from calibration.command_io import check_profile_out, write_profile
    from endpoint.calibrate import Settings, calibrate, disagreement, keep_partial, saturation_check
    from endpoint.cli import limits
    from endpoint.measure import check_url, served_model
    from endpoint.probes import ProbeData
    from endpoint.records import write_text
    from endpoint.replay import load_vocab
    from sim.cli.console import console

    timeout, time_limit = limits(args)
    budget = getattr(args, "time_budget", 600.0)
    if not budget >= 0:
        raise InputError("--time-budget", budget, "expected seconds ≥ 0 (0: no budget)")
    url = check_url(args.endpoint)
    served = served_model(url, args.served_model, "--served-model")
    sim_model = sim_model_for(url, served, args.model)
    vocab = load_vocab(url, args.tokenizer)
    path = check_profile_out(args.out or "profile-endpoint.json")
    s = Settings(url=url, model=served, sim_model=sim_model, quick=args.quick, seed=args.seed,
                 progress=not args.no_progress, device_type="cpu" if args.device == "cpu" else "gpu",
                 request_timeout=timeout, time_limit=time_limit,
                 time_budget=budget or None)
    data = ProbeData()
    try:
        profile, fragment, data = calibrate(s, vocab, data=data)
    except InputError as e:  # the server failed a probe, or time ran out: keep what was measured
        kept = keep_partial(data, path)
        raise InputError(e.source, e.field, f"{e.message}; no profile written, the measurements so far "
                         f"are in {kept}") from None
    unchecked = path.with_suffix(".unchecked.json")
    write_profile(profile, unchecked)  # the saturation check simulates with it
    try:
        sat = saturation_check(unchecked, fragment, data, path.parent)
    finally:
        unchecked.unlink(missing_ok=True)
    grid = dict(profile.grid)
    grid["fit"] = {**grid["fit"], "saturation": sat}
    grid["phases_s"] = data.phases_s
    off = disagreement(sat)
    if off and not args.force:
        kept = keep_partial(data, path)
        raise InputError("--endpoint", url, f"{off}; no profile written (--force writes it anyway), the "
                         f"measurements are in {kept}")
    notes = list(profile.notes) + ([f"written with --force: {off}"] if off else [])
    profile = profile.model_copy(update={"grid": grid, "notes": notes})
    write_profile(profile, path)
    frag_path = path.with_suffix(".scenario.yaml")
    fragment["cost"]["profile"] = path.name
    write_text(frag_path, "# scheduler inferred by servesim calibrate --endpoint; merge into a scenario\n"
               + yaml.safe_dump(fragment, sort_keys=False))
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


def validate_endpoint(args, scenario, source: str, out: Path, bounds: dict[str, float]) -> int:
    """Measure ``scenario`` on the server and simulate it with ``--profile``; write and judge."""
    from calibration.command_io import record_validation, report_validation, write_validation
    from endpoint.cli import limits
    from endpoint.measure import check_url, served_model
    from endpoint.validate import validate
    from sim.cli.console import console

    timeout, time_limit = limits(args)
    url = check_url(args.endpoint)
    served = served_model(url, args.served_model, "--served-model")
    v = validate(scenario, args.profile, url, served, source=source, tokenizer=args.tokenizer,
                 repeats=args.repeats, out=out, log=lambda m: console.print(m), request_timeout=timeout,
                 time_limit=time_limit)
    write_validation(v, out)
    record_validation(v, args.profile, f"the endpoint {url} ({served})", console)
    return report_validation(v, out, "validation.json, report.html, requests.csv, run*/", bounds, console)
