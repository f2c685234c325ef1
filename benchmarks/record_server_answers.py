"""Record what a live server answers at every place an engine publishes itself, for the tests
of ``endpoint/server_info.py`` (``tests/endpoint/data/server_answers/NAME.json``).

    python benchmarks/record_server_answers.py http://127.0.0.1:8000 --name vllm-cpu \\
        --fact version=0.32.0 --fact max_model_len=2048 --fact block_size=128 --fact num_gpu_blocks=182

``--fact KEY=VALUE``: what the server was started with (its flags, or what its log printed),
written beside the answers so that the test compares the reading with the truth.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from endpoint.server_info import PATHS  # noqa: E402
from endpoint.server_metrics import base_url, get  # noqa: E402

OUT = REPO / "tests" / "endpoint" / "data" / "server_answers"


def _value(v: str):
    try:
        return int(v)
    except ValueError:
        return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--name", required=True)
    ap.add_argument("--fact", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    answers: dict[str, object] = {}
    for path in PATHS:
        body = get(args.url, path)
        if body is None:
            continue
        text = body.decode("utf-8", "replace")
        if path == "/metrics":
            answers[path] = text
        else:
            try:
                answers[path] = json.loads(text)
            except json.JSONDecodeError:
                answers[path] = text
    facts = dict(f.split("=", 1) for f in args.fact)
    out = {"url": base_url(args.url), "recorded": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "facts": {k: _value(v) for k, v in facts.items()}, "answers": answers}
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{path}: {', '.join(answers)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
