"""A/B: django-pgjobs at another commit against the working tree, alternating on one server.

``python -m bench.ab BASE [--rounds 5] [--only drain_defaults_1,enqueue_1] [--full]``
checks ``BASE`` (any git ref) out in a temporary worktree, starts one throwaway PostgreSQL
(durable commits) unless ``DATABASE_URL`` is set, and runs ``python -m bench --systems pgjobs
--quick --repeat 1`` (``--full``: the full sizes) from each tree in turn, ``--rounds`` times,
the order swapped every round: the machine's noise falls on both alike. Both sides run the
working tree's harness (``bench/``); only the package differs. It prints each measurement's
median for both, their ratio (working tree / base) and every sample, and writes them to
``bench-results/ab-<UTC time>.json``. The question it answers: is a change within noise of
before on the paths it touches (a figure for a note or a pull request, not for the docs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ONLY = "enqueue_1,enqueue_8,drain_defaults_1,drain_1"


def run_bench(tree: Path, only: str, server_url: str, quick: bool = True) -> dict:
    """One ``python -m bench`` of pgjobs from ``tree``: its measurements' medians."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "bench", "--systems", "pgjobs"]
        command += ["--quick"] if quick else []
        command += ["--repeat", "1", "--only", only, "--out", out]
        env = {**os.environ, "DATABASE_URL": server_url, "PYTHONPATH": str(tree)}
        subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True)
        results = json.loads((Path(out) / "results.json").read_text())
    entry = results["systems"]["pgjobs"]
    medians = {}
    for name, value in entry.items():
        median = value.get("median") if isinstance(value, dict) else None
        if isinstance(median, (int, float)):
            medians[name] = median
        elif isinstance(median, dict):  # latency: each percentile
            medians.update({f"{name}.{k}": v for k, v in median.items()})
    floor = results.get("latency_floor") or {}
    medians.update({f"latency_floor.{k}": v for k, v in floor.items() if k != "samples"})
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the git ref to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=DEFAULT_ONLY, help="measurements (bench --only)")
    parser.add_argument(
        "--full", action="store_true", help="the full sizes (30,000-job drains), not --quick"
    )
    args = parser.parse_args(argv)
    base_tree = Path(tempfile.mkdtemp(prefix="pgjobs-ab-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(base_tree), args.base],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    # One harness for both sides, the working tree's: only the package differs. A base's own
    # bench/ may time things differently (before the bulk driver held its exit out of the
    # drain, a 6,000-job drain measured the producer's exit more than the drain).
    shutil.rmtree(base_tree / "bench")
    shutil.copytree(ROOT / "bench", base_tree / "bench")
    trees = {"base": base_tree, "head": ROOT}
    samples: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    try:
        server_url = os.environ.get("DATABASE_URL") or _throwaway_server()
        for round_number in range(args.rounds):
            order = ["base", "head"] if round_number % 2 == 0 else ["head", "base"]
            for side in order:
                for name, value in run_bench(
                    trees[side], args.only, server_url, not args.full
                ).items():
                    samples[side].setdefault(name, []).append(value)
            print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT)
    report = _report(args, samples)
    out = ROOT / "bench-results" / time.strftime("ab-%Y-%m-%dT%H%MZ.json", time.gmtime())
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _throwaway_server() -> str:
    from bench.run import make_durable
    from testproject import throwaway_pg

    url = throwaway_pg.start()
    make_durable(url)
    return url


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"  # jobs/s, or milliseconds


def _report(args: argparse.Namespace, samples: dict) -> dict:
    head_commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    rows = {}
    print(f"| measurement | {args.base} (median) | working tree on {head_commit} | ratio |")
    print("|---|---|---|---|")
    for name in samples["head"]:
        base, head = samples["base"].get(name, []), samples["head"][name]
        if not base:
            continue
        ratio = statistics.median(head) / statistics.median(base)
        rows[name] = {"base": base, "head": head, "ratio": ratio}
        print(
            f"| {name} | {_figure(statistics.median(base))} | {_figure(statistics.median(head))} "
            f"| {ratio:.2f}x |"
        )
    return {
        "base": args.base,
        "head": head_commit,
        "rounds": args.rounds,
        "sizes": "full" if args.full else "quick",
        "measurements": rows,
    }


if __name__ == "__main__":
    sys.exit(main())
