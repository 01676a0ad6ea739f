"""The batched SQL floor: the least PostgreSQL needs to drain the jobs, run by ``pgbench``.

No Python: ``pgbench`` clients (``-M prepared``, durable commits) each run one statement per
transaction, the shape of the worker's own acknowledge-and-claim: delete the batch it claimed
last time, and claim the next 50 due jobs of the claim index (``FOR UPDATE SKIP LOCKED``,
stamped running with a token and a lease), keeping their ids for the next turn (``\\gset``).
What a job needs beyond that (its arguments read, its attempt and start recorded by name,
the notification, the executor) is the worker's.

The clock is the drain's: from the start of the first transaction (``pgbench``'s own
connection time taken off) until the table is empty, read every 5 ms. ``bench.ceiling`` runs
it beside each drain, with as many clients as the drain has processes.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

BATCH = 50

SCRIPT = """\
WITH done AS (
    DELETE FROM pgjobs_job WHERE id = ANY (:ids::bigint[]) AND status = 'running'
),
candidates AS (
    SELECT id FROM pgjobs_job
    WHERE status = 'ready' AND run_after <= now() AND flow_key IS NULL
    ORDER BY priority DESC, run_after, id
    LIMIT {batch}
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE pgjobs_job AS j
    SET status = 'running', attempts = j.attempts + 1, claim_token = gen_random_uuid(),
        worker = 'floor', started_at = now(), first_started_at = now(),
        lease_expires_at = now() + interval '60 seconds'
    FROM candidates AS c WHERE j.id = c.id
    RETURNING j.id
)
SELECT coalesce(array_agg(id), '{{}}') AS ids FROM claimed
\\gset
"""

INSERT_READY = """
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, created_at, worker, errors)
SELECT 'bench.noop', 'default', 0, '[]', '{}', 'ready', now() - interval '1 second', 0, 5, now(),
       '', '[]'
FROM generate_series(1, %s)
"""

CONNECTION_TIME = re.compile(r"initial connection time = ([0-9.]+) ms")


def drain(url: str, jobs: int, clients: int, prefix: list[str] | None = None) -> dict:
    """Enqueue ``jobs`` ready rows (one statement) and drain them with ``clients`` pgbench
    clients; returns jobs/s and what pgbench said."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM pgjobs_job")
        conn.execute(INSERT_READY, (jobs,))
        # every client gets its share and then some (an empty turn costs one index probe):
        # clients that got ahead stop, the others finish the queue
        turns = int(jobs / BATCH / clients * 1.5) + 3
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "floor.sql"
            script.write_text(SCRIPT.format(batch=BATCH))
            command = [
                *(prefix or []),
                "pgbench",
                "--no-vacuum",
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                str(clients),
                "-t",
                str(turns),
                "-D",
                "ids={}",
                "-f",
                str(script),
                url,
            ]
            started = time.time()
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            while conn.execute("SELECT 1 FROM pgjobs_job LIMIT 1").fetchone():
                if process.poll() is not None:
                    break
                time.sleep(0.005)
            finished = time.time()
            output, _ = process.communicate(timeout=120)
        left = conn.execute("SELECT count(*) FROM pgjobs_job").fetchone()[0]
        if process.returncode != 0 or left:
            raise RuntimeError(f"the floor's pgbench left {left} jobs:\n{output}")
    match = CONNECTION_TIME.search(output)
    connecting = float(match.group(1)) / 1000 if match else 0.0
    return {
        "jobs_per_s": jobs / max(1e-6, finished - started - connecting),
        "connection_seconds": connecting,
    }
