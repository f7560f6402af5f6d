"""Benchmark of the paid path's rate limiting: one endpoint, eight threads, injected 429s.

The project's fake OpenAI server (``tests/fake_openai.py``) answers 30% of the requests with
HTTP 429 and a Retry-After (evenly spread, so exactly 30%). Two measures:

1. The issue's (13): eight agent runs on the flask world, launched at concurrency 8 through
   ``adakit.study.launch.launch`` against one endpoint. Every run must finish, and the requests sent
   must stay within 1.5x the requests that were answered (30% refusals alone make 1.43x).
2. Side by side, 8 threads x N calls straight to ``OpenAIBackend``: the endpoint-wide limiter
   (a 429 pauses every thread) against each thread backing off on its own, on two servers:
   one whose 429s are independent, and one that holds its Retry-After (it refuses everything
   until then, as a rate-limited provider does). Against the second, threads that keep
   sending during the pause each earn a 429 of their own.

The script prints its figures and never fails on a missed target.

    python benchmarks/bench_paid.py [--runs 8] [--turns 10] [--calls 25] [--retry-after 0.05] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import Ratio, print_ratios  # noqa: E402

from adakit.llm.models import ModelSpec, OpenAIBackend, RetryPolicy  # noqa: E402
from tests.fake_openai import FakeOpenAI, reply  # noqa: E402

FRACTION = 0.3
THREADS = 8
TARGET_RATIO = 1.5
KEY = "ADAKIT_BENCH_" + "KEY"


def _agent(turns: int):
    def answer(request: dict) -> object:
        k = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
        if k >= turns:
            text = ("<thinking>done</thinking><stash_conclusion><content>read</content>"
                    "<proceed_to_finalize>true</proceed_to_finalize></stash_conclusion>")
        else:
            text = (f"<thinking>step {k}</thinking><peek_code_region><file_path>src/flask/app.py"
                    f"</file_path><start_line>{10 * k}</start_line><end_line>{10 * k + 9}"
                    "</end_line></peek_code_region>")
        return reply(text, delay=0.01)

    return answer


def launch_runs(runs: int, turns: int, retry_after: float) -> dict[str, float]:
    """The issue's measure: ``runs`` agent runs at concurrency 8 on one endpoint."""
    from adakit.record import load_corpus
    from adakit.study.launch import launch
    from adakit.study.spec import load_study

    tasks = ["architecture_analysis", "feature_tracing", "risk_review", "asr_inference"]
    conditions = ["natural", "prior_suppression", "budget_pressure", "combined"]
    with tempfile.TemporaryDirectory(prefix="adakit-bench-paid-") as tmp, \
            FakeOpenAI(_agent(turns), rate_limit=FRACTION, retry_after=retry_after) as fake:
        tmp_path = Path(tmp)
        models = tmp_path / "models.yaml"
        models.write_text(yaml.safe_dump({"models": {"bench-llm": {
            "base_url": fake.url, "model_id": "bench-paid", "api_key_env": KEY,
            "max_tokens": 200, "context_window": 64000}}}))
        os.environ.update(ADAKIT_MODELS=str(models), ADAKIT_CACHE=str(tmp_path / "cache"))
        os.environ[KEY] = "bench-" + "not-a-key"
        cells = [(t, c) for c in conditions for t in tasks][:runs]
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump({
            "name": "bench-paid", "output": str(tmp_path / "runs"), "concurrency": THREADS,
            "turn_bound": turns + 2,
            "matrix": [{"models": ["bench-llm"], "worlds": ["flask"], "tasks": [t],
                        "conditions": [c]} for t, c in cells],
        }))
        spec = load_study(study)
        t0 = time.perf_counter()
        summary = launch(spec, progress=False)
        seconds = time.perf_counter() - t0
        corpus = load_corpus(tmp_path / "runs", cache=False)
        finished = int((corpus.runs["reason"] == "finalize").sum())
        return {
            "runs": len(spec.specs), "finished": finished, "failed": len(summary.attrs["failed"]),
            "requests": len(fake.requests), "answered": fake.answered, "refused": fake.refused,
            "max_in_flight": fake.max_in_flight, "seconds": seconds,
        }


def hammer(calls: int, retry_after: float, shared: bool, hold: bool) -> dict[str, float]:
    """8 threads x ``calls`` calls to one endpoint; the limiter shared or per thread."""
    with FakeOpenAI(lambda request: reply("ok", delay=0.01), rate_limit=FRACTION,
                    retry_after=retry_after, hold=hold) as fake:
        spec = ModelSpec(name="bench", base_url=fake.url, model_id=f"bench-{shared}-{hold}-{fake.port}",
                         api_key_env=KEY)
        policy = RetryPolicy(attempts=6, base=retry_after, cap=1.0)
        limiter = "shared" if shared else None
        messages = [{"role": "user", "content": "hello"}]

        def worker(_: int) -> int:
            backend = OpenAIBackend(spec, retry=policy, limiter=limiter)
            ok = 0
            for _ in range(calls):
                try:
                    ok += backend.complete(messages).text == "ok"
                except Exception:  # a call that gave up: counted as not done
                    pass
            return ok

        t0 = time.perf_counter()
        with ThreadPoolExecutor(THREADS) as pool:
            done = sum(pool.map(worker, range(THREADS)))
        return {"done": done, "calls": THREADS * calls, "requests": len(fake.requests),
                "answered": fake.answered, "refused": fake.refused,
                "max_in_flight": fake.max_in_flight, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="agent runs (at most 16)")
    parser.add_argument("--turns", type=int, default=10, help="turns per run")
    parser.add_argument("--calls", type=int, default=25, help="calls per thread in part 2")
    parser.add_argument("--retry-after", type=float, default=0.05, help="Retry-After of a 429 (s)")
    parser.add_argument("--quick", action="store_true",
                        help="2 runs of 3 turns, 4 calls per thread, Retry-After 0.01 s (seconds)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.turns, args.calls, args.retry_after = 2, 3, 4, 0.01
    if not (1 <= args.runs <= 16) or args.turns < 1 or args.calls < 1 or args.retry_after < 0:
        parser.error("need 1-16 runs, at least 1 turn and 1 call, and a Retry-After >= 0")

    print(f"one endpoint, {THREADS} threads, {FRACTION:.0%} of requests answered 429 "
          f"(Retry-After {args.retry_after:g} s)")
    r = launch_runs(args.runs, args.turns, args.retry_after)
    ratio = r["requests"] / max(r["answered"], 1)
    print(f"1. agent runs through adakit.study.launch.launch ({r['runs']} runs x {args.turns} turns, "
          f"concurrency {THREADS}):")
    print(f"   runs finished {r['finished']}/{r['runs']} (failed {r['failed']}); "
          f"requests {r['requests']}, answered {r['answered']}, refused {r['refused']}")
    print(f"   total / successful requests = {ratio:.3f} (target <= {TARGET_RATIO}; "
          f"{FRACTION:.0%} refusals alone make {1 / (1 - FRACTION):.3f}); "
          f"max in flight {r['max_in_flight']}; {r['seconds']:.1f} s")
    rows = [Ratio("agent runs finished", r["finished"], r["runs"], ">=", fmt="{:.0f}"),
            Ratio("agent runs, requests per request answered", ratio, TARGET_RATIO, fmt="{:.3f}")]
    rows += hammer_table(args.calls, args.retry_after)
    print_ratios(rows)
    return 0


def hammer_table(calls: int, retry_after: float) -> list[Ratio]:
    """Part 2, printed as a table: the endpoint-wide pause beside per-thread backoff on both
    servers; returns its ratio rows (requests per call done, endpoint-wide vs per thread)."""
    print(f"2. {THREADS} threads x {calls} calls straight to the backend:")
    head = ("server", "backoff", "calls done", "requests", "429s", "requests/done",
            "max in flight", "seconds")
    rows = [head]
    per_done: dict[tuple[bool, bool], float] = {}
    for hold in (False, True):
        for shared in (True, False):
            h = hammer(calls, retry_after, shared, hold)
            per_done[hold, shared] = h["requests"] / max(h["done"], 1)
            rows.append((
                "holds its Retry-After" if hold else "independent 429s",
                "endpoint-wide" if shared else "per thread",
                f"{h['done']}/{h['calls']}", str(h["requests"]), str(h["refused"]),
                f"{per_done[hold, shared]:.3f}", str(h["max_in_flight"]),
                f"{h['seconds']:.2f}",
            ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        print("   " + "  ".join(c.rjust(w) if i >= 2 else c.ljust(w)
                                for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return [Ratio(f"requests per call done, {'holding' if hold else 'independent'} server, "
                  "endpoint-wide vs per thread", per_done[hold, True],
                  baseline=per_done[hold, False], fmt="{:.3f}")
            for hold in (False, True)]


if __name__ == "__main__":
    sys.exit(main())
