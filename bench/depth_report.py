"""The Markdown of ``bench/depth.py``'s results (``results.md`` beside ``results.json``)."""

from __future__ import annotations

import json
from pathlib import Path


def label(size) -> str:
    """``1000`` as 1,000; ``1000 at 0020_x`` as 1,000 (at 0020_x)."""
    rows, _, migration = str(size).partition(" at ")
    return f"{int(rows):,}" + (f" (at {migration})" if migration else "")


def write(out: Path, results: dict) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "results.md").write_text(report(results))


def report(results: dict) -> str:
    lines = [
        f"Measured {results['meta']['date']} at {results['meta']['commit'][:10]}, "
        f"load average {results['meta']['load_average'][0]:.1f}",
        "",
    ]
    sizes = results.get("sizes", {})
    if sizes:
        lines += [
            "| ready rows | claim p50 / p90 (ms) | EXPLAIN ms | buffers hit / read | "
            "index rows returned / filtered | enqueue p50 (ms) | ack p50 (ms) | heartbeat p50 (ms) | "
            "table + indexes (MB) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for size, f in sizes.items():
            lines.append(
                f"| {label(size)} | {f['claim_ms_p50']:.2f} / {f['claim_ms_p90']:.2f} | "
                f"{f['explain_ms_p50']:.2f} | {f['explain_hit_p50']:.0f} / {f['explain_read_p50']:.0f} | "
                f"{f['explain_scan_rows_p50']:.0f} / {f['explain_scan_filtered_p50']:.0f} | "
                f"{f['enqueue_ms_p50']:.2f} | {f['ack_ms_p50']:.2f} | "
                f"{f['heartbeat_ms_p50']:.2f} | "
                f"{(f['table_bytes'] + f['index_bytes']) / 2**20:,.0f} |"
            )
        last = list(sizes.values())[-1]
        lines += [
            "",
            "Claim plan at the largest size:",
            "",
            "```text",
            *last["explain_shape"],
            "```",
            "",
        ]
    horizon = results.get("horizon")
    if horizon:
        lines += [
            f"Held xmin horizon at {horizon['size']:,} ready rows:",
            "",
            "| jobs claimed and deleted since the snapshot | claim p50 (ms) | EXPLAIN ms | buffers hit / read |",
            "|---:|---:|---:|---:|",
        ]
        for p in horizon["points"]:
            lines.append(
                f"| {p['jobs_since_snapshot']} | {p['claim_ms_p50']:.2f} | "
                f"{p['explain_ms_p50']:.2f} | {p['explain_hit_p50']:.0f} / {p['explain_read_p50']:.0f} |"
            )
    return "\n".join(lines) + "\n"
