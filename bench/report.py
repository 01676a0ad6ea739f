"""Turn a result dict of ``bench.run`` into the Markdown table of docs/benchmarks.md."""

from __future__ import annotations

import statistics

# What users get first: every system's worker started with no options (its documented
# defaults), then each one tuned.
ROWS = [
    ("drain_defaults_1", "drain no-op jobs, no flags, 1 worker process (jobs/s)", "rate"),
    ("drain_defaults_2", "drain no-op jobs, no flags, 2 worker processes (jobs/s)", "rate"),
    ("enqueue_1", "enqueue, 1 job per transaction, 1 producer (jobs/s)", "rate"),
    ("enqueue_8", "enqueue, 1 job per transaction, 8 producers (jobs/s)", "rate"),
    ("enqueue_8_nonotify", "... same, notifications off (jobs/s)", "rate"),
    ("enqueue_8_atomic", "enqueue inside transaction.atomic(), 8 producers (jobs/s)", "rate"),
    ("enqueue_8_atomic_nonotify", "... same, notifications off (jobs/s)", "rate"),
    ("bulk", "bulk enqueue, one call (jobs/s)", "rate"),
    ("drain_1", "drain no-op jobs, tuned, 1 worker process (jobs/s)", "rate"),
    ("drain_2", "drain no-op jobs, tuned, 2 worker processes (jobs/s)", "rate"),
    ("drain_best", "drain no-op jobs, tuned, the better of 1 and 2 processes (jobs/s)", "rate"),
    ("sleepy", "drain 2-5 ms sleeping jobs, parallelism 32 (jobs/s)", "rate"),
    ("sleepy_async", "... same as async def jobs, 32 on one event loop (jobs/s)", "rate"),
    ("latency_listen", "enqueue -> start p50 / p99, LISTEN/NOTIFY (ms)", "latency"),
    ("latency_poll", "enqueue -> start p50 / p99, polling every 1 s (ms)", "latency"),
]


def _cell(entry, kind: str) -> str:
    if entry is None:
        return "n/a"
    if "invalid" in entry:
        return "invalid (see notes)"
    if "error" in entry:
        return "error"
    if kind == "latency":
        return f"{entry['median']['p50_ms']:.1f} / {entry['median']['p99_ms']:.1f}"
    return f"{entry['median']:,.0f}"


def _value(entry, kind: str):
    if not entry or "error" in entry or "invalid" in entry:
        return None
    return entry["median"]["p50_ms"] if kind == "latency" else entry["median"]


def with_best_drain(results: dict) -> dict:
    """``results`` with ``drain_best`` added to each system that has both drains: the better of
    its 1-process and 2-process medians. Comparing best with best is the fair comparison of the
    drains: neither system is held to a process count that suits it badly."""
    systems = {}
    for system, entry in results["systems"].items():
        entry = dict(entry)
        drains = {key: _value(entry.get(key), "rate") for key in ("drain_1", "drain_2")}
        if None not in drains.values():
            best = max(drains, key=drains.get)
            entry["drain_best"] = {"median": drains[best], "from": best}
        systems[system] = entry
    return {**results, "systems": systems}


def write_reports(results: dict) -> str:
    results = with_best_drain(results)
    systems = results["systems"]
    names = [s for s in systems if "skipped" not in systems[s]]
    peers = [s for s in names if s != "pgjobs"]
    lines = []
    header = ["measurement", *[systems[s]["label"] for s in names]]
    header += [f"vs {systems[p]['label']}" for p in peers if "pgjobs" in names]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for key, title, kind in ROWS:
        if not any(key in systems[s] for s in names):
            continue
        cells = [title] + [_cell(systems[s].get(key), kind) for s in names]
        if "pgjobs" in names:
            ours = _value(systems["pgjobs"].get(key), kind)
            for peer in peers:
                theirs = _value(systems[peer].get(key), kind)
                if ours is None or theirs is None or key.endswith("_nonotify"):
                    cells.append("")
                elif kind == "latency":  # lower is better: their time / ours
                    cells.append(f"{theirs / ours:.2f}×")
                else:
                    cells.append(f"{ours / theirs:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Medians; the `vs` columns are django-pgjobs' advantage (throughput: ours ÷ theirs; "
        "latency: their p50 ÷ ours), so above 1× means django-pgjobs is better. The row of "
        "the better of 1 and 2 processes compares each system's best drain with ours. \"No "
        'flags" starts each worker with its documented defaults; "tuned" with the options '
        "listed in docs/benchmarks.md."
    )
    for spec in systems.values():
        if "skipped" in spec:
            lines.append(f"\n{spec['label']}: skipped ({spec['skipped']}).")
    raw = results.get("raw_sql") or {}
    if raw:
        lines.append("")
        insert = raw.get("insert_1_per_tx_per_s")
        lines.append(
            "Raw-SQL limit (django-pgjobs' claim and acknowledge statements from psycopg, one "
            f"connection): {raw['batch_1_jobs_per_s']:,.0f} jobs/s one job per claim "
            f"(claim_jobs + complete_jobs), {raw['batch_50_jobs_per_s']:,.0f} jobs/s in batches "
            "of 50 (complete_and_claim_jobs)"
            + (
                f"; a bare one-row INSERT per transaction: {insert:,.0f}/s"
                if insert is not None
                else ""
            )
            + f" ({_medians_of(raw)})."
        )
    floor = results.get("latency_floor") or {}
    if floor:
        lines.append("")
        lines.append(
            "Latency floor (the least a durable PostgreSQL queue can do here, psycopg, one "
            "thread each side, a job every 20 ms on average): enqueue → claimed p50 "
            f"{floor['claim_p50_ms']:.1f} ms / p99 {floor['claim_p99_ms']:.1f} ms (INSERT and "
            "NOTIFY in one statement; the consumer claims with FOR UPDATE SKIP LOCKED, "
            "synchronous commit, on its LISTEN connection); the notification alone p50 "
            f"{floor['notify_p50_ms']:.1f} ms / p99 {floor['notify_p99_ms']:.1f} ms "
            f"({_medians_of(floor)})."
        )
    notify = results.get("notify") or {}
    if notify.get("off"):
        off = notify["off"]
        lines.append("")
        lines.append(
            "NOTIFY at commit (8 threads, one job per explicit transaction, psycopg): "
            f"{off:,.0f} jobs/s without notifications; "
            f"{notify['in_transaction']:,.0f} ({notify['in_transaction'] / off:.0%}) with "
            "pg_notify in every transaction; "
            f"{notify['after_every_commit']:,.0f} ({notify['after_every_commit'] / off:.0%}) "
            "with notify_queue after every commit; "
            f"{notify['after_commit_coalesced']:,.0f} "
            f"({notify['after_commit_coalesced'] / off:.0%}) with notify_queue after a commit "
            f"at most every 10 ms per thread ({_medians_of(notify)})."
        )
    claim = results.get("claim_cost") or {}
    if claim.get("rows_large"):
        small, large = claim["rows_10k"], claim["rows_large"]
        lines.append("")
        lines.append(
            "Claim cost (complete_and_claim_jobs, batch 10): p50 "
            f"{small['p50_ms']:.2f} ms with 10k rows of history/scheduled jobs, "
            f"{large['p50_ms']:.2f} ms with {claim['history_rows']:,} rows "
            f"({claim['table_size']}): {large['p50_ms'] / small['p50_ms']:.2f}× "
            f"(mean {small['mean_ms']:.2f} → {large['mean_ms']:.2f} ms; {_medians_of(small)}; "
            "the table filled once per size)."
        )
    lines.extend(targets(results))
    meta = results.get("meta") or {}
    if meta:
        lines.append("")
        lines.append(
            f"Run: `{meta['command'].strip()}`"
            + (f" at commit {meta['commit']}" if meta.get("commit") else "")
            + f" on {meta['date']}, {meta['cpus']} CPUs, Python "
            f"{meta['python']}, PostgreSQL {meta['server'].get('server_version')} "
            f"(fsync {meta['server'].get('fsync')}, synchronous_commit "
            f"{meta['server'].get('synchronous_commit')}), medians of {meta['repeat']} runs, "
            f"{meta['seconds']} s in all. Versions: "
            + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
            + "."
        )
    return "\n".join(lines) + "\n"


def _medians_of(figures: dict) -> str:
    samples = figures.get("samples")
    return f"medians of {len(samples)} runs" if samples else "one run"


def _median(results: dict, system: str, key: str):
    entry = results["systems"].get(system, {}).get(key)
    if not entry or "error" in entry or "invalid" in entry:
        return None
    return entry["median"]


def targets(results: dict) -> list[str]:
    """The targets of the performance work, each with this run's figure: met or missed."""
    results = with_best_drain(results)
    rows = []  # (target, this run's figure, met: True/False, or None for a row for reference)

    def ratio(key: str, peer: str, goal: float, what: str, verdict: bool = True) -> None:
        ours, theirs = _median(results, "pgjobs", key), _median(results, peer, key)
        if ours is None or theirs is None:
            return
        value = ours / theirs
        rows.append((what, f"{value:.2f}× (≥ {goal}×)", value >= goal if verdict else None))

    defaults = {"drain_defaults_1": "1 process", "drain_defaults_2": "2 processes"}
    for peer, goal in (("pgqueuer", 1.5), ("tasksdb", 10)):
        label = results["systems"].get(peer, {}).get("label", peer)
        for key, count in defaults.items():
            ratio(key, peer, goal, f"no-op drain, no flags, {count} each, vs {label}")
    processes = {"drain_1": "1 process", "drain_2": "2 processes"}
    for peer, goal in (("pgqueuer", 1.5), ("procrastinate", 10), ("tasksdb", 10)):
        label = results["systems"].get(peer, {}).get("label", peer)
        ours = results["systems"].get("pgjobs", {}).get("drain_best")
        theirs = results["systems"].get(peer, {}).get("drain_best")
        if ours and theirs:
            value = ours["median"] / theirs["median"]
            rows.append(
                (
                    f"no-op drain, best vs best, vs {label}",
                    f"{value:.2f}× (≥ {goal}×): {ours['median']:,.0f} jobs/s "
                    f"({processes[ours['from']]}) vs {theirs['median']:,.0f} "
                    f"({processes[theirs['from']]})",
                    value >= goal,
                )
            )
        for key, count in processes.items():
            ratio(key, peer, goal, f"no-op drain, {count} each, vs {label}", verdict=False)
    ratio("enqueue_1", "pgqueuer", 1.3, "enqueue 1/transaction, 1 producer, vs PgQueuer")
    ratio("enqueue_8", "pgqueuer", 1.3, "enqueue 1/transaction, 8 producers, vs PgQueuer")
    ratio("bulk", "pgqueuer", 1.0, "bulk enqueue vs PgQueuer")
    listen = _median(results, "pgjobs", "latency_listen")
    if listen:
        rows.append(
            ("enqueue→start p50, LISTEN", f"{listen['p50_ms']:.1f} ms (≤ 2)", listen["p50_ms"] <= 2)
        )
        rows.append(
            ("enqueue→start p99, LISTEN", f"{listen['p99_ms']:.1f} ms (≤ 6)", listen["p99_ms"] <= 6)
        )
    poll = _median(results, "pgjobs", "latency_poll")
    if poll:
        rows.append(
            (
                "enqueue→start p99, polling every 1 s",
                f"{poll['p99_ms']:.0f} ms (≤ 1000)",
                poll["p99_ms"] <= 1000,
            )
        )
    claim = results.get("claim_cost") or {}
    if claim.get("rows_large"):
        value = claim["rows_large"]["p50_ms"] / claim["rows_10k"]["p50_ms"]
        rows.append(
            (
                f"claim p50 with {claim['history_rows']:,} rows vs 10k",
                f"{value:.2f}× (≤ 1.2×)",
                value <= 1.2,
            )
        )
    ours = results["systems"].get("pgjobs", {})
    for key, what, goal in (
        ("enqueue_8", "8 producers, notifications on ÷ off", 0.8),
        ("enqueue_8_atomic", "8 producers in transaction.atomic(), notifications on ÷ off", 0.9),
    ):
        on, off = ours.get(key, {}), ours.get(f"{key}_nonotify", {})
        if on.get("samples") and off.get("samples"):
            # measured in pairs (off right after on), so compare pair by pair
            pairs = [a / b for a, b in zip(on["samples"], off["samples"], strict=False)]
            value = statistics.median(pairs)
            rows.append((what, f"{value:.0%} (≥ {goal:.0%})", value >= goal))
    if not rows:
        return []
    status = {True: "met", False: "**missed**", None: "for reference"}
    lines = ["", "| target | this run | |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {status[ok]} |" for what, value, ok in rows]
    lines.append("")
    lines.append(
        "The no-op drain targets compare each system's better drain (1 or 2 processes) with "
        "ours; the same-process-count rows are for reference."
    )
    return lines
