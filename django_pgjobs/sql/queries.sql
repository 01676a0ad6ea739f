-- Every SQL statement django-pgjobs runs, each under a "-- name: <name>" header followed by a
-- one-line description. django_pgjobs/sql/__init__.py loads this file once; code refers to
-- statements by name only. Parameters are psycopg named placeholders; nothing is ever formatted
-- into the text.

-- name: enqueue_job
-- Insert one job; returns only what the database chose (id, times). A job whose unique_key is
-- already ready or running is not inserted (no row comes back). Workers listening on the job's
-- queue are woken when it is due now; PostgreSQL folds identical notifications of one
-- transaction into one.
WITH inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, unique_key, timeout, created_at, worker, errors,
                            keep_result, task_backend, trace_context, version)
    VALUES (%(name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb, 'ready',
            COALESCE(%(run_after)s::timestamptz, now()), 0, %(max_attempts)s, %(unique_key)s,
            %(timeout)s::float8, now(), '', '[]'::jsonb, %(keep_result)s::boolean,
            %(task_backend)s, %(trace_context_json)s::jsonb, %(version)s::int)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    DO NOTHING
    RETURNING id, queue, run_after, created_at, unique_key
)
SELECT inserted.id, inserted.run_after, inserted.created_at, inserted.unique_key,
       CASE WHEN %(notify)s AND inserted.run_after <= now()
            THEN pg_notify('pgjobs', inserted.queue) END IS NULL AS _notified
FROM inserted;

-- name: enqueue_job_flow
-- enqueue_job for a job with a flow key (flow.py): the same insert, plus the key's row
-- (pgjobs_flow_key: flow_key_told).
WITH inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, unique_key, timeout, created_at, worker, errors,
                            keep_result, task_backend, trace_context, version, flow_key)
    VALUES (%(name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb, 'ready',
            COALESCE(%(run_after)s::timestamptz, now()), 0, %(max_attempts)s, %(unique_key)s,
            %(timeout)s::float8, now(), '', '[]'::jsonb, %(keep_result)s::boolean,
            %(task_backend)s, %(trace_context_json)s::jsonb, %(version)s::int, %(flow_key)s)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    DO NOTHING
    RETURNING id, queue, run_after, created_at, unique_key
),
{{flow_key_told}}
SELECT inserted.id, inserted.run_after, inserted.created_at, inserted.unique_key,
       CASE WHEN %(notify)s AND inserted.run_after <= now()
            THEN pg_notify('pgjobs', 'flow:' || inserted.queue) END IS NULL AS _notified
FROM inserted;

-- Enqueueing with unique rules (django_pgjobs/uniqueness.py; docs/howto/unique.md). Each is one
-- statement deciding against a unique index or the throttle window's primary key, never a read
-- then a write. Each returns the written row whole with `created` (true: inserted, false: a
-- debounced update of the waiting job holding the key); no row: skipped.

-- part: flow_key_told
-- CTEs after `inserted` (the job just written, with its run_after) of a job with a flow key
-- (`flow_key`; none: they write nothing): the key's row created with its limits and a full
-- bucket, or told that a job of it is due at run_after, with a rate limit not before its next
-- token (`ready_at`, only ever made earlier) and given the limits of this enqueue when they
-- changed. The update touches (and locks, until the
-- caller commits) the key's row only then: enqueues to a key already due leave it alone, so
-- they never hold up its claims. `told` runs before `added` (PostgreSQL runs the CTEs the
-- statement does not read from the last one up): an update that waited for the pruner's lock
-- and found the key deleted is followed by an insert that sees the deletion and writes the
-- key again; the other way round, the job was committed with no key (tests/test_flow_keys.py).
added AS (
    INSERT INTO pgjobs_flow_key (key, concurrency_limit, rate, burst, tokens, refilled_at,
                                 ready_at)
    SELECT %(flow_key)s, %(concurrency_limit)s::int, %(rate)s::float8, %(burst)s::float8,
           COALESCE(%(burst)s::float8, 0), now(), inserted.run_after
    FROM inserted
    WHERE %(flow_key)s::text IS NOT NULL
    ON CONFLICT (key) DO NOTHING
),
told AS (
    UPDATE pgjobs_flow_key AS k
    SET ready_at = LEAST(COALESCE(k.ready_at, due.at), due.at),
        concurrency_limit = %(concurrency_limit)s::int,
        rate = %(rate)s::float8,
        burst = %(burst)s::float8,
        tokens = LEAST(k.tokens, COALESCE(%(burst)s::float8, 0))
    FROM (
        -- when the job may be claimed: at its run_after, and with a rate limit not before the
        -- key's next token (the bucket under this enqueue's limits, refilled to now). Made due
        -- at once, a key whose bucket was empty took a lane of the next flow claim, which it
        -- could give nothing: a stream of enqueues to such keys kept other keys waiting.
        SELECT GREATEST(inserted.run_after,
                        CASE WHEN %(rate)s::float8 IS NULL OR b.key IS NULL
                             THEN inserted.run_after
                             ELSE statement_timestamp() + GREATEST(1 - LEAST(
                                      %(burst)s::float8,
                                      LEAST(b.tokens, %(burst)s::float8)
                                      + %(rate)s::float8 * GREATEST(extract(
                                          epoch FROM statement_timestamp() - b.refilled_at
                                      )::float8, 0)), 0)
                                  / %(rate)s::float8 * interval '1 second'
                        END) AS at
        FROM inserted LEFT JOIN pgjobs_flow_key AS b ON b.key = %(flow_key)s
    ) AS due
    WHERE k.key = %(flow_key)s
      AND (k.ready_at IS NULL OR k.ready_at > due.at
           OR k.concurrency_limit IS DISTINCT FROM %(concurrency_limit)s::int
           OR k.rate IS DISTINCT FROM %(rate)s::float8
           OR k.burst IS DISTINCT FROM %(burst)s::float8)
)

-- part: insert_keyed_job
-- The INSERT of one job with a unique key, as a SELECT (a statement may add a WHERE):
-- `unique_key` holds the key for the scope 'in_flight', `waiting_key` for 'waiting' (and
-- `kept_waiting_key`, which the claim leaves: see restore_waiting_keys).
INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                        max_attempts, unique_key, waiting_key, kept_waiting_key, timeout,
                        created_at, worker, errors, keep_result, task_backend, version)
SELECT %(name)s::text, %(queue)s::text, %(priority)s::smallint, %(args)s::jsonb,
       %(kwargs)s::jsonb, 'ready', COALESCE(%(run_after)s::timestamptz, now()), 0,
       %(max_attempts)s::int, %(unique_key)s::text, %(waiting_key)s::text, %(waiting_key)s::text,
       %(timeout)s::float8, now(), '', '[]'::jsonb, %(keep_result)s::boolean,
       %(task_backend)s::text, %(version)s::int

-- part: debounce_waiting_job
-- The conflict action of a debounced enqueue: the waiting job holding the key takes the newer
-- arguments (`replace_args`) and/or due time (`move_run_after`). A running holder (scope
-- 'in_flight') is left alone: no row comes back, the enqueue is skipped. A holder waiting for
-- its retry (attempts > 0) becomes the newer call with the newer call's whole budget: its
-- max_attempts is raised to its spent attempts plus the call's (its attempt numbers stay used, so
-- no number runs twice, as the rescue does; its error history is kept).
DO UPDATE SET
    args = CASE WHEN %(replace_args)s::boolean THEN EXCLUDED.args ELSE pgjobs_job.args END,
    kwargs = CASE WHEN %(replace_args)s::boolean THEN EXCLUDED.kwargs ELSE pgjobs_job.kwargs END,
    run_after = CASE WHEN %(move_run_after)s::boolean THEN EXCLUDED.run_after
                     ELSE pgjobs_job.run_after END,
    max_attempts = CASE WHEN pgjobs_job.attempts > 0
                        THEN pgjobs_job.attempts + EXCLUDED.max_attempts
                        ELSE pgjobs_job.max_attempts END
WHERE pgjobs_job.status = 'ready'
RETURNING pgjobs_job.*, pgjobs_job.xmax = 0 AS created

-- part: open_throttle_window
-- Open the key's throttle window for `throttle` seconds, unless it is open: no row then. Two
-- enqueues racing for a closed window: the second waits for the first's row and finds it open.
INSERT INTO pgjobs_throttle (key, ends_at)
VALUES (%(throttle_key)s::text, statement_timestamp() + %(throttle)s::float8 * interval '1 second')
ON CONFLICT (key) DO UPDATE SET ends_at = EXCLUDED.ends_at
WHERE pgjobs_throttle.ends_at <= statement_timestamp()
RETURNING key

-- part: wake_written
-- The end of the statements above: the written row, and the workers listening on its queue
-- woken when it is due now (as enqueue_job).
SELECT written.*,
       CASE WHEN %(notify)s AND written.run_after <= now()
            THEN pg_notify('pgjobs', written.queue) END IS NULL AS _notified
FROM written

-- name: enqueue_job_waiting
-- enqueue_job for the scope 'waiting': skipped while a job holding the key waits.
WITH written AS (
    {{insert_keyed_job}}
    ON CONFLICT (waiting_key) WHERE waiting_key IS NOT NULL DO NOTHING
    RETURNING *, true AS created
)
{{wake_written}};

-- name: enqueue_job_debounced
-- A debounced enqueue, scope 'in_flight': insert, or update the waiting job holding the key.
WITH written AS (
    {{insert_keyed_job}}
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    {{debounce_waiting_job}}
)
{{wake_written}};

-- name: enqueue_job_waiting_debounced
-- A debounced enqueue, scope 'waiting'.
WITH written AS (
    {{insert_keyed_job}}
    ON CONFLICT (waiting_key) WHERE waiting_key IS NOT NULL
    {{debounce_waiting_job}}
)
{{wake_written}};

-- name: enqueue_job_throttled
-- A throttled enqueue, scope 'in_flight': inserted only if it opens the key's window and the
-- key is free. (A window opened by an enqueue skipped because the key is still held stays open:
-- at most one job per window, the one in flight.) A running job enqueueing its own key
-- (`running_id`, `running_token`; NULL otherwise) hands it over here, only when the window
-- opens, so the insert that follows takes it: a skipped self-enqueue leaves the key with the
-- running job. `handed` is read by the insert's WHERE, so it has run before the insert checks
-- the index (a row this statement updated no longer conflicts).
WITH opened AS ({{open_throttle_window}}),
handed AS (
    UPDATE pgjobs_job SET unique_key = NULL
    WHERE id = %(running_id)s::bigint AND claim_token = %(running_token)s::uuid
      AND status = 'running' AND unique_key = %(unique_key)s::text
      AND EXISTS (SELECT FROM opened)
    RETURNING id
),
written AS (
    {{insert_keyed_job}}
    WHERE EXISTS (SELECT FROM opened) AND (SELECT count(*) FROM handed) >= 0
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    DO NOTHING
    RETURNING *, true AS created
)
{{wake_written}};

-- name: enqueue_job_waiting_throttled
-- A throttled enqueue, scope 'waiting'.
WITH opened AS ({{open_throttle_window}}),
written AS (
    {{insert_keyed_job}}
    WHERE EXISTS (SELECT FROM opened)
    ON CONFLICT (waiting_key) WHERE waiting_key IS NOT NULL DO NOTHING
    RETURNING *, true AS created
)
{{wake_written}};

-- name: find_waiting_by_unique_key
-- The waiting job holding a key of the scope 'waiting'.
SELECT * FROM pgjobs_job WHERE waiting_key = %(unique_key)s;

-- name: hand_over_unique_key
-- A running job enqueueing its own unique key (scope 'in_flight', not throttled: the throttled
-- statement hands over itself) hands it over: its row stops
-- holding the key, so the job it enqueues can take it (the self-rescheduling job); fenced by its
-- claim token. Run just before that enqueue, in the same transaction when there is one.
-- enqueue_many gives the keys of its calls (`unique_keys`), enqueue the one.
UPDATE pgjobs_job SET unique_key = NULL
WHERE id = %(id)s AND claim_token = %(token)s::uuid AND status = 'running'
  AND unique_key = ANY(%(unique_keys)s::text[])
RETURNING id;

-- name: prune_throttle_windows
-- Delete the throttle windows past their end (a plain condition: an enqueue reopening a window
-- meanwhile is waited for and its new end checked again).
DELETE FROM pgjobs_throttle WHERE ends_at < now() RETURNING key;

-- name: prune_flow_keys
-- Delete the flow keys idle (no job ready nor running: `ready_at` NULL) for `idle_seconds` since
-- they were last served, written or made idle (`refilled_at`, which the claim that makes a key
-- idle sets: a job whose enqueue it could not see is made due by the rescue meanwhile), at most
-- 10,000 at a time, skipping the ones a claim is deciding on. An enqueue meeting a key being
-- deleted waits for the delete (its update of the key, flow_key_told), then writes the key again.
DELETE FROM pgjobs_flow_key AS k
WHERE k.key IN (
    SELECT key FROM pgjobs_flow_key
    WHERE ready_at IS NULL
      AND COALESCE(GREATEST(last_served_at, refilled_at), '-infinity')
          < now() - %(idle_seconds)s * interval '1 second'
    LIMIT 10000
    FOR UPDATE SKIP LOCKED
)
  AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS j
                  WHERE j.flow_key = k.key AND j.status IN ('ready', 'running'))
RETURNING k.key;

-- name: enqueue_jobs
-- Insert many jobs of one kind in one statement: the per-job values (args, kwargs, unique key)
-- come as parallel arrays (unnest), the rest once; same rules as enqueue_job and one notification
-- per statement when the jobs are due. Returns one row with what the database chose: the ids and
-- unique keys of the inserted jobs as arrays, in input order (as Django's bulk_create relies on;
-- jobs whose unique_key was in flight are missing), and the due and creation times, which every
-- job of the statement shares (one row instead of two timestamps per job to decode).
WITH inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, unique_key, timeout, created_at, worker, errors,
                            keep_result, trace_context, version)
    SELECT %(name)s::text, %(queue)s::text, %(priority)s::smallint, a, k, 'ready',
           COALESCE(%(run_after)s::timestamptz, now()), 0, %(max_attempts)s::int, u,
           %(timeout)s::float8, now(), '', '[]'::jsonb, %(keep_result)s::boolean,
           %(trace_context_json)s::jsonb, %(version)s::int
    FROM unnest(%(args)s::jsonb[], %(kwargs)s::jsonb[], %(unique_keys)s::text[]) AS rows(a, k, u)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    DO NOTHING
    RETURNING id, run_after, created_at, unique_key
),
woken AS (
    SELECT pg_notify('pgjobs', %(queue)s::text)
    WHERE %(notify)s
      AND EXISTS (SELECT 1 FROM inserted WHERE run_after <= now())
)
SELECT ARRAY(SELECT id FROM inserted) AS ids,
       ARRAY(SELECT unique_key FROM inserted) AS unique_keys,
       (SELECT min(run_after) FROM inserted) AS run_after,
       now() AS created_at
FROM (SELECT count(*) FROM woken) AS notified;

-- name: enqueue_workflow
-- Insert a workflow (django_pgjobs/workflows.py) and every job of every step in one statement:
-- per-job values as parallel arrays (unnest, in step order), the first step's jobs 'ready', the
-- later ones 'blocked' (outside the claim's index) until advance_workflows releases them. Workers
-- of the first step's queues are woken when `notify`. Returns the workflow's id and its jobs'
-- ids in input order. Each job carries its payload's `version`, as enqueue_job writes it (left
-- to the column's default, a step of a @job(version=2) was "upgraded" from version 1 when run).
WITH workflow AS (
    INSERT INTO pgjobs_workflow (name, state, step, remaining, sizes, groups, reason, created_at)
    VALUES (%(workflow_name)s::text, 'running', 0, %(first_size)s::int, %(sizes)s::jsonb,
            %(groups)s::jsonb, '', now())
    RETURNING id
),
inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, timeout, created_at, worker, errors, keep_result,
                            task_backend, version, workflow_id, workflow_step, workflow_member)
    SELECT n, q, p, a, k, CASE WHEN s = 0 THEN 'ready' ELSE 'blocked' END, COALESCE(r, now()), 0,
           m, t, now(), '', '[]'::jsonb, kr, tb, v, workflow.id, s, mem
    FROM workflow,
         unnest(%(names)s::text[], %(queues)s::text[], %(priorities)s::smallint[],
                %(args)s::jsonb[], %(kwargs)s::jsonb[], %(run_afters)s::timestamptz[],
                %(max_attempts)s::int[], %(timeouts)s::float8[], %(keep_results)s::boolean[],
                %(task_backends)s::text[], %(versions)s::int[], %(steps)s::int[],
                %(members)s::int[])
             AS rows(n, q, p, a, k, r, m, t, kr, tb, v, s, mem)
    RETURNING id, queue, status, run_after
),
woken AS (
    SELECT pg_notify('pgjobs', queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE status = 'ready' AND run_after <= now())
         AS due
    WHERE %(notify)s
)
SELECT (SELECT id FROM workflow) AS workflow_id, ARRAY(SELECT id FROM inserted) AS ids,
       now() AS created_at
FROM (SELECT count(*) FROM woken) AS notified;

-- name: workflow_previous_results
-- The kept results of the step before job `id`'s, in member order (`result`, a JSON array),
-- how many of its jobs kept one (`kept`: the rows left of that step that keep their result; with
-- KEEP_SUCCEEDED_SECONDS on, a job that does not keep it stays too, with none), that step's
-- size and whether it is a group (`is_group`; NULL step: the job is not a later step of a
-- workflow).
SELECT prev.step, prev.size, prev.is_group, kept.result, kept.kept
FROM pgjobs_job AS j
JOIN pgjobs_workflow AS w ON w.id = j.workflow_id
CROSS JOIN LATERAL (
    SELECT NULLIF(j.workflow_step, 0) - 1 AS step,
           (w.sizes ->> (j.workflow_step - 1))::int AS size,
           COALESCE(w.groups @> to_jsonb(j.workflow_step - 1), false) AS is_group
) AS prev
CROSS JOIN LATERAL (
    SELECT jsonb_agg(p.result ORDER BY p.workflow_member) AS result,
           count(*) FILTER (WHERE p.keep_result)::int AS kept
    FROM pgjobs_job AS p
    WHERE p.workflow_id = j.workflow_id AND p.workflow_step = prev.step
) AS kept
WHERE j.id = %(id)s;

-- name: notify_queue
-- Wake the workers listening on a queue, after the enqueueing transaction committed, in a
-- transaction of its own (autocommit). NOTIFY holds a cluster-wide lock until its commit is
-- over; this commit writes no data, so it need not wait for the WAL flush and frees the lock at
-- once (a notification lost in a crash loses nothing: workers also poll).
SELECT set_config('synchronous_commit', 'off', true), pg_notify('pgjobs', %(queue)s::text);

-- name: find_in_flight_by_unique_key
-- The ready or running job holding a unique key (what enqueue returns for a duplicate).
SELECT * FROM pgjobs_job
WHERE unique_key = %(unique_key)s AND status IN ('ready', 'running');

-- name: claim_jobs
-- Claim due jobs for one worker, in one statement: the partial claim index in claim order,
-- SKIP LOCKED so workers never wait for each other, fencing token stamped at claim time. Each
-- kind of job is capped at its own room (`async_names` against `async_room`, every other name
-- against `sync_room`). Every claimed job gets its attempt number (attempts + 1, so a number is
-- never run twice); only the first `sync_starts` / `async_starts` of a kind (its free slots:
-- they start at once) have their start recorded, the others are held (`started_at` NULL until
-- mark_started; a held job the rescue finds unstarted has its attempt given back). A held job
-- the rescue once gave back unstarted (`returned_unstarted`) comes with `start_recorded_first`:
-- its executor records its start (mark_started) before running it, not after.
-- `skip_names`: names of a kind whose slots are full. A claimed job no longer holds a key of the
-- unique scope 'waiting' (`waiting_key`). `only_ids` (unless `any_id`): the jobs an
-- immediate-mode run claims, those its caller enqueued and no other (immediate.py). Jobs with a
-- flow key (limits, fairness) are left to claim_jobs_flow. Why each part:
-- docs/explanation/claim.md.
WITH candidates AS (
    SELECT id, ctid, priority, run_after, name = ANY(%(async_names)s::text[]) AS is_async
    FROM pgjobs_job
    WHERE status = 'ready'
      AND run_after <= now()
      AND (%(all_queues)s OR queue = ANY(%(queues)s::text[]))
      AND (%(any_name)s OR name <> ALL(%(skip_names)s::text[]))
      AND (%(any_id)s OR id = ANY(%(only_ids)s::bigint[]))
      AND queue NOT IN (SELECT name FROM pgjobs_queue WHERE paused)
      AND flow_key IS NULL
    ORDER BY priority DESC, run_after, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
),
{{claim_ranked}}
{{claim_picked}};

-- name: claim_jobs_skipping
-- claim_jobs for a worker whose slots of one kind are full (`skip_names`: that kind's names):
-- it looks for jobs of the other kind among the first 1,000 due jobs in claim order (`due`),
-- not past every one of them. Unbounded, with a backlog of the full kind, each such claim
-- walked the whole backlog (300 ms at 800,000 jobs) at every wake-up and the worker fell
-- further behind (docs/explanation/claim.md). A job past the window waits for a slot of the
-- full kind to free up: the next claim takes the head of the queue again. Carried by the
-- complete_*_and_claim_jobs_skipping statements as claim_jobs is by theirs.
WITH due AS (
    SELECT id
    FROM pgjobs_job
    WHERE status = 'ready'
      AND run_after <= now()
      AND (%(all_queues)s OR queue = ANY(%(queues)s::text[]))
      AND (%(any_id)s OR id = ANY(%(only_ids)s::bigint[]))
      AND queue NOT IN (SELECT name FROM pgjobs_queue WHERE paused)
      AND flow_key IS NULL
    ORDER BY priority DESC, run_after, id
    LIMIT 1000
),
candidates AS (
    -- Each job of the window looked up by its key, in the window's order, locked as it is
    -- taken, until `limit` are: a subquery the planner cannot flatten (OFFSET 0), whose status
    -- check (`IS TRUE`) no partial index can serve, so the key is the only way in. Joined
    -- plainly, a planner that believed the table nearly empty (its statistics from a vacuum
    -- between bursts) scanned the whole table once per job of the window: 514 s for one claim.
    SELECT j.id, j.ctid, j.priority, j.run_after, j.is_async
    FROM due CROSS JOIN LATERAL (
        SELECT id, ctid, priority, run_after, name = ANY(%(async_names)s::text[]) AS is_async
        FROM pgjobs_job
        WHERE id = due.id
          AND (status = 'ready') IS TRUE
          AND name <> ALL(%(skip_names)s::text[])
        OFFSET 0
    ) AS j
    LIMIT %(limit)s::int
    FOR UPDATE OF j SKIP LOCKED
),
{{claim_ranked}}
{{claim_picked}};

-- part: claim_ranked
-- The claim statements' `candidates` ranked within their kind and `picked` within its room.
ranked AS (
    SELECT id, ctid, is_async,
           row_number() OVER (PARTITION BY is_async ORDER BY priority DESC, run_after, id)
               AS place
    FROM candidates
),
picked AS (
    SELECT id, ctid,
           place <= CASE WHEN is_async THEN %(async_starts)s::int ELSE %(sync_starts)s::int END
               AS starts
    FROM ranked
    WHERE place <= CASE WHEN is_async THEN %(async_room)s::int ELSE %(sync_room)s::int END
)

-- part: claim_picked
-- The end of the claim statements: stamp the `picked` jobs (id, ctid, starts) as claimed by
-- this worker under this claim's token, and return what the worker reads of each. Found by the
-- ctid each candidate was locked at (a Tid Scan per job, whatever the planner believes):
-- joined by id alone, a planner whose statistics said the table was nearly empty (a vacuum
-- between bursts) walked the whole primary key and re-ranked the candidates for each entry,
-- O(table) per claim (tests/test_claim_window.py). The id is checked too. A candidate another
-- transaction updated after this statement's snapshot but before its lock (still ready: a
-- debounced enqueue, "run now") was locked at its new version, which this snapshot does not
-- see: it is not claimed this time, and stays ready for the next claim.
UPDATE pgjobs_job AS j
SET status = 'running',
    attempts = j.attempts + 1,
    max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
    claim_token = %(token)s::uuid,
    worker = %(worker)s,
    waiting_key = NULL,
    started_at = CASE WHEN picked.starts THEN now() END,
    first_started_at = CASE WHEN picked.starts THEN COALESCE(j.first_started_at, now())
                            ELSE j.first_started_at END,
    lease_expires_at = now() + %(lease_seconds)s::float8 * interval '1 second'
FROM picked
WHERE j.ctid = picked.ctid AND j.id = picked.id
RETURNING j.id, j.name, j.queue, j.priority, j.args, j.kwargs,
          j.attempts, j.max_attempts,
          j.timeout,
          j.task_backend, j.version,
          extract(epoch FROM j.run_after)::float8 AS run_after,
          extract(epoch FROM j.created_at)::float8 AS created_at, j.keep_result,
          j.abort_requested_at IS NOT NULL AS abort_requested, NOT picked.starts AS held,
          j.returned_unstarted AND NOT picked.starts AS start_recorded_first,
          j.trace_context, j.workflow_id

-- name: claim_jobs_flow
-- Claim due jobs that have a flow key (concurrency limit, rate limit, fairness key), in one
-- statement, deciding every limit in it (docs/explanation/flow-control.md):
-- `lanes`: the due keys, least recently served first, locked FOR UPDATE SKIP LOCKED (a second
-- claimer skips a key another is deciding on), and skipped too when the last claim that took a
-- job of the key is not visible to this statement's snapshot (`claimed_xid`): its running jobs
-- would be missing from the count below (READ COMMITTED re-reads the locked row, not the rest).
-- Only keys that can give this worker a job now (one due in its queues, not paused, and a
-- free slot), or that have nothing due or out any more (so `served` moves their `ready_at`
-- on): a key whose jobs all run, or wait in a paused queue or one this worker does not serve,
-- stays due but takes no lane. Taking the first `lanes` due keys whatever they held, 100 keys
-- of a paused queue kept every other key's jobs waiting for good (tests/test_flow_control.py).
-- `room`: each key's free slots (its limit less its running jobs, counted: a job that ended in
-- any way frees its slot) and its tokens (the bucket refilled to now, capped at `burst`).
-- `candidates`: each key's first ready due jobs in FIFO order (run_after, id), as many as its
-- room; a future-scheduled or retrying job is after them in the index, never ahead.
-- `picked`: round robin across keys (first job of each key, then the second...), keys least
-- recently served first, within the claim's limit and each kind's room; stamped as claim_jobs
-- does (claim_picked). `served`: the keys' new state: tokens spent, served now, and `ready_at`,
-- when a job of the key may next be claimable (now while jobs of it are out: they may come back
-- by retry, rescue or release; else its next ready job, and not before its next token).
-- Its clock is statement_timestamp() (not now(): the transaction's start), so that buckets
-- refill and keys come due between the claims of one transaction too (run_jobs() in a
-- TestCase); a key claimed earlier in this transaction counts as seen.
-- Returns the claimed rows, then one row with `flow_wait`: seconds to the earliest key due
-- later, among those it served and the others (NULL: none), and NULL claim columns.
WITH lanes AS (
    SELECT walk.key, walk.concurrency_limit, walk.rate, walk.burst, walk.last_served_at,
           walk.available
    FROM (
        -- the walk: due keys in lane order, each locked and looked at in turn until `lanes`
        -- are found (OFFSET 0: the tests below stay above it, run only for the keys reached)
        SELECT k.key, k.concurrency_limit, k.rate, k.burst, k.last_served_at,
               CASE WHEN k.rate IS NOT NULL
                    THEN LEAST(k.burst, k.tokens + k.rate * GREATEST(
                             extract(epoch FROM statement_timestamp() - k.refilled_at)::float8,
                             0))
               END AS available
        FROM pgjobs_flow_key AS k
        WHERE k.ready_at IS NOT NULL AND k.ready_at <= statement_timestamp()
          AND (k.claimed_xid IS NULL
               OR k.claimed_xid = pg_current_xact_id_if_assigned()::text::bigint
               OR pg_visible_in_snapshot(k.claimed_xid::text::xid8, pg_current_snapshot()))
        ORDER BY k.last_served_at ASC NULLS FIRST, k.key
        OFFSET 0
        FOR UPDATE SKIP LOCKED
    ) AS walk
    WHERE CASE
        -- a job of the key this worker may take (its queues, not paused), and a free slot
        -- (each test looks up this key alone: OFFSET 0 keeps it from being hashed over every
        -- job of the table instead)
        WHEN EXISTS (
            SELECT 1 FROM pgjobs_job AS j
            WHERE j.flow_key = walk.key AND j.status = 'ready'
              AND j.run_after <= statement_timestamp()
              AND (%(all_queues)s OR j.queue = ANY(%(queues)s::text[]))
              AND (%(any_name)s OR j.name <> ALL(%(skip_names)s::text[]))
              AND (%(any_id)s OR j.id = ANY(%(only_ids)s::bigint[]))
              AND j.queue NOT IN (SELECT name FROM pgjobs_queue WHERE paused)
            OFFSET 0)
        THEN walk.concurrency_limit IS NULL OR walk.concurrency_limit > (
            SELECT count(*) FROM pgjobs_job AS r
            WHERE r.flow_key = walk.key AND r.status = 'running')
        -- none: only to be told when it is due next (`served`), once no job of it is due
        -- anywhere or out
        ELSE NOT EXISTS (SELECT 1 FROM pgjobs_job AS o
                         WHERE o.flow_key = walk.key AND o.status = 'running' OFFSET 0)
             AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS o
                             WHERE o.flow_key = walk.key AND o.status = 'ready'
                               AND o.run_after <= statement_timestamp() OFFSET 0)
        END
    LIMIT %(lanes)s::int
),
room AS (
    -- counted for every key, limited or not: a key with jobs out stays due (`served`)
    SELECT l.*,
           (SELECT count(*) FROM pgjobs_job AS r
            WHERE r.flow_key = l.key AND r.status = 'running')::int AS running
    FROM lanes AS l
),
candidates AS (
    SELECT c.id, c.ctid, c.is_async, c.place, room.key AS lane, room.last_served_at
    FROM room
    CROSS JOIN LATERAL (
        SELECT id, ctid, is_async, row_number() OVER (ORDER BY run_after, id) AS place
        FROM (
            SELECT j.id, j.ctid, j.run_after, j.name = ANY(%(async_names)s::text[]) AS is_async
            FROM pgjobs_job AS j
            WHERE j.flow_key = room.key
              AND j.status = 'ready'
              AND j.run_after <= statement_timestamp()
              AND (%(all_queues)s OR j.queue = ANY(%(queues)s::text[]))
              AND (%(any_name)s OR j.name <> ALL(%(skip_names)s::text[]))
              AND (%(any_id)s OR j.id = ANY(%(only_ids)s::bigint[]))
              AND j.queue NOT IN (SELECT name FROM pgjobs_queue WHERE paused)
            ORDER BY j.run_after, j.id
            LIMIT GREATEST(LEAST(
                COALESCE(room.concurrency_limit - room.running, %(limit)s::int),
                COALESCE(floor(room.available)::int, %(limit)s::int),
                %(limit)s::int), 0)
            FOR UPDATE SKIP LOCKED
        ) AS due
    ) AS c
),
ranked AS (
    SELECT id, ctid, is_async, lane,
           row_number() OVER (ORDER BY place, last_served_at ASC NULLS FIRST, lane) AS overall,
           row_number() OVER (PARTITION BY is_async
                              ORDER BY place, last_served_at ASC NULLS FIRST, lane) AS kind_place
    FROM candidates
),
picked AS (
    SELECT id, ctid, lane,
           kind_place <= CASE WHEN is_async THEN %(async_starts)s::int
                              ELSE %(sync_starts)s::int END AS starts
    FROM ranked
    WHERE overall <= %(limit)s::int
      AND kind_place <= CASE WHEN is_async THEN %(async_room)s::int ELSE %(sync_room)s::int END
),
claimed AS ({{claim_picked}}),
taken AS MATERIALIZED (  -- its sub-selects run once per key, not once per use below
    SELECT room.key, room.rate, room.running, room.available,
           (SELECT count(*) FROM picked WHERE picked.lane = room.key)::int AS taken,
           (SELECT j.run_after FROM pgjobs_job AS j
            WHERE j.flow_key = room.key AND j.status = 'ready'
              AND NOT EXISTS (SELECT 1 FROM picked WHERE picked.id = j.id)
            ORDER BY j.run_after, j.id LIMIT 1) AS next_ready
    FROM room
),
tokened AS (
    SELECT key, taken, available - taken AS tokens_left,
           CASE WHEN rate IS NULL OR available - taken >= 1 THEN statement_timestamp()
                ELSE statement_timestamp()
                     + (1 - (available - taken)) / rate * interval '1 second'
           END AS token_at,
           running + taken > 0 AS out,
           next_ready
    FROM taken
),
planned AS (
    SELECT key, taken, tokens_left,
           CASE WHEN out THEN token_at
                WHEN next_ready IS NULL THEN NULL
                ELSE GREATEST(next_ready, token_at) END AS ready_at
    FROM tokened
),
served AS (
    -- a key that gave no job and stays due is left as it is (its bucket is refilled from
    -- refilled_at whenever it is read): no write for the keys a claim only looked at. A key
    -- made idle has its bucket brought up to now (the same tokens from then on): refilled_at
    -- says when it went idle, and the pruner counts its idle day from there. Counted from its
    -- last service, a key whose job ran for a day went from this claim to the pruner at once,
    -- and a job of it whose enqueue this claim could not see waited on no key for good.
    UPDATE pgjobs_flow_key AS k
    SET tokens = CASE WHEN p.taken > 0 OR p.ready_at IS NULL
                      THEN COALESCE(p.tokens_left, k.tokens) ELSE k.tokens END,
        refilled_at = CASE WHEN (k.rate IS NOT NULL AND p.taken > 0) OR p.ready_at IS NULL
                           THEN GREATEST(statement_timestamp(), k.refilled_at)
                           ELSE k.refilled_at END,
        last_served_at = CASE WHEN p.taken > 0 THEN statement_timestamp()
                              ELSE k.last_served_at END,
        claimed_xid = CASE WHEN p.taken > 0 THEN pg_current_xact_id()::text::bigint
                           ELSE k.claimed_xid END,
        ready_at = p.ready_at
    FROM planned AS p
    WHERE k.key = p.key
      AND (p.taken > 0 OR p.ready_at IS NULL OR p.ready_at > statement_timestamp())
    RETURNING k.ready_at
)
SELECT claimed.*, NULL::float8 AS flow_wait FROM claimed
UNION ALL
SELECT claimed.*,
       extract(epoch FROM LEAST(
           (SELECT min(ready_at) FROM served WHERE ready_at > statement_timestamp()),
           (SELECT min(ready_at) FROM pgjobs_flow_key WHERE ready_at > statement_timestamp()))
           - statement_timestamp())::float8
FROM (SELECT) AS waited LEFT JOIN claimed ON false;

-- name: mark_started
-- Record the start of held jobs an executor took, `ago` seconds back (from then on the rescue
-- treats them as started: their attempt is spent); fenced. A row whose start is already
-- recorded is left alone.
UPDATE pgjobs_job AS j
SET started_at = now() - started.ago * interval '1 second',
    first_started_at = COALESCE(j.first_started_at, now() - started.ago * interval '1 second')
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(ago)s::float8[]) AS started(id, token, ago)
WHERE j.id = started.id AND j.claim_token = started.token AND (j.status = 'running') IS TRUE
  AND j.started_at IS NULL
RETURNING j.id;

-- part: count_unrecorded_start
-- SET items of the statements that end an attempt (alias j): a held job whose start the worker
-- had not recorded yet (started_at NULL) has its start set now.
started_at = COALESCE(j.started_at, now()),
first_started_at = COALESCE(j.first_started_at, j.started_at, now())

-- part: advance_workflows
-- CTEs after `completed` (the jobs this statement completed, fenced): each workflow among them
-- counts its step's jobs done (`remaining`); the statement that brings it to zero moves the
-- workflow to its next step and makes that step's jobs (written 'blocked') ready, waking the
-- workers of their queues (one notification per queue and transaction). The workflow rows are
-- locked in id order first, so two statements advancing the same workflows never deadlock; a
-- statement that waited sees the other's count (UPDATE re-reads the row it waited for), so two
-- members finishing at once release the next step exactly once. A job outside a workflow adds
-- nothing to lock or update (empty `finished_steps`); the release runs only when a step moved
-- (the EXISTS: a one-time filter, so its scan of pgjobs_job_workflow_idx is skipped otherwise).
finished_steps AS (
    SELECT workflow_id, workflow_step, count(*)::int AS done
    FROM completed
    WHERE workflow_id IS NOT NULL
    GROUP BY workflow_id, workflow_step
),
locked_workflows AS (
    SELECT w.id FROM pgjobs_workflow AS w
    WHERE w.id IN (SELECT workflow_id FROM finished_steps)
    ORDER BY w.id
    FOR UPDATE
),
advanced AS (
    UPDATE pgjobs_workflow AS w
    SET remaining = CASE WHEN w.remaining > f.done THEN w.remaining - f.done
                         ELSE COALESCE((w.sizes ->> (w.step + 1))::int, 0) END,
        step = CASE WHEN w.remaining > f.done THEN w.step ELSE w.step + 1 END,
        state = CASE WHEN w.remaining <= f.done AND w.state = 'running'
                          AND w.step + 1 >= jsonb_array_length(w.sizes)
                     THEN 'succeeded' ELSE w.state END,
        finished_at = CASE WHEN w.remaining <= f.done AND w.step + 1 >= jsonb_array_length(w.sizes)
                           THEN now() ELSE w.finished_at END
    FROM finished_steps AS f, locked_workflows AS l
    WHERE w.id = f.workflow_id AND l.id = w.id AND w.step = f.workflow_step
    RETURNING w.id, w.step, w.step = f.workflow_step + 1 AS moved
),
released AS (
    UPDATE pgjobs_job AS j
    SET status = 'ready', run_after = GREATEST(j.run_after, now())
    FROM advanced AS a
    WHERE a.moved AND j.workflow_id = a.id AND j.workflow_step = a.step AND j.status = 'blocked'
      AND EXISTS (SELECT 1 FROM advanced WHERE moved)
    RETURNING pg_notify('pgjobs', j.queue)
)

-- name: complete_jobs
-- Delete successful jobs, fenced: only rows still running under the claim token given. (Their
-- workflow and step come back for complete_workflow_jobs; NULL outside a workflow.) Each job is
-- found by its key, the status check written `IS TRUE` as in extend_leases: written plainly,
-- the planner hashed every running job of every worker, read through the lease index, to find
-- the batch (14 ms for 200 jobs among 10,000 running in a table of a million; by key 0.8 ms).
-- The statements that complete jobs or record their start below do the same.
DELETE FROM pgjobs_job AS j
USING unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS done(id, token)
WHERE j.id = done.id AND j.claim_token = done.token AND (j.status = 'running') IS TRUE
RETURNING j.id, j.workflow_id, j.workflow_step;

-- name: complete_jobs_retained
-- Mark successful jobs as 'successful' (retention on), fenced like complete_jobs.
UPDATE pgjobs_job AS j
SET status = 'successful', finished_at = now(), lease_expires_at = NULL, claim_token = NULL,
    {{count_unrecorded_start}}
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS done(id, token)
WHERE j.id = done.id AND j.claim_token = done.token AND (j.status = 'running') IS TRUE
RETURNING j.id, j.workflow_id, j.workflow_step;

-- name: complete_jobs_with_results
-- Mark successful jobs that keep their result as 'successful' with their return values (JSON
-- texts, parallel to the ids), fenced like complete_jobs. Only jobs with keep_result come here:
-- the others keep the complete_jobs path.
UPDATE pgjobs_job AS j
SET status = 'successful', finished_at = now(), lease_expires_at = NULL, claim_token = NULL,
    result = done.result, {{count_unrecorded_start}}
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::jsonb[]) AS done(id, token, result)
WHERE j.id = done.id AND j.claim_token = done.token AND (j.status = 'running') IS TRUE
RETURNING j.id, j.workflow_id, j.workflow_step;

-- name: complete_and_claim_jobs
-- Acknowledge finished jobs and claim new ones in one round trip (the worker's hot path).
-- Why one statement: with short jobs the round trip, not the work, is the cost; folding the
-- batch of acknowledgements into the next claim halves the statements per batch
-- (docs/explanation/acknowledgements.md). Made of complete_jobs and claim_jobs themselves.
-- Jobs of workflows never come here (complete_workflow_jobs counts them).
WITH completed AS ({{complete_jobs}}),
{{claimed_then_completed}};

-- name: complete_retained_and_claim_jobs
-- complete_and_claim_jobs with retention on (complete_jobs_retained instead of complete_jobs).
WITH completed AS ({{complete_jobs_retained}}),
{{claimed_then_completed}};

-- name: complete_with_results_and_claim_jobs
-- complete_and_claim_jobs for jobs that keep their result (complete_jobs_with_results).
WITH completed AS ({{complete_jobs_with_results}}),
{{claimed_then_completed}};

-- name: complete_and_claim_jobs_skipping
-- complete_and_claim_jobs carrying claim_jobs_skipping (a kind's slots full).
WITH completed AS ({{complete_jobs}}),
{{claimed_skipping_then_completed}};

-- name: complete_retained_and_claim_jobs_skipping
WITH completed AS ({{complete_jobs_retained}}),
{{claimed_skipping_then_completed}};

-- name: complete_with_results_and_claim_jobs_skipping
WITH completed AS ({{complete_jobs_with_results}}),
{{claimed_skipping_then_completed}};

-- name: complete_workflow_jobs
-- Complete jobs of workflows (complete_jobs) and count them (advance_workflows), in one
-- statement: the release of a workflow's next step commits with the acknowledgement of the job
-- that completes the step before. operations.complete sends the jobs of workflows here (the
-- claim tells it which: `workflow_id`), the others keep the statements above, unchanged.
WITH completed AS ({{complete_jobs}}),
{{advance_workflows}}
SELECT id FROM completed;

-- name: complete_workflow_jobs_retained
-- complete_workflow_jobs with retention on.
WITH completed AS ({{complete_jobs_retained}}),
{{advance_workflows}}
SELECT id FROM completed;

-- name: complete_workflow_jobs_with_results
-- complete_workflow_jobs for jobs that keep their result.
WITH completed AS ({{complete_jobs_with_results}}),
{{advance_workflows}}
SELECT id FROM completed;

-- part: claimed_then_completed
-- The end of the acknowledge-and-claim statements, after their `completed` CTE. Both CTEs see
-- one snapshot and touch disjoint rows (completed: running, claimed: ready). Output: one row per
-- claimed job, then one row whose `completed` holds the ids acknowledged (a missing id was no
-- longer held under its token) and whose claim columns are all NULL: the claim's own columns,
-- from a join that matches no row, so a column added to the claim's RETURNING is here too.
claimed AS ({{claim_jobs}})
{{claimed_and_completed_rows}};

-- part: claimed_skipping_then_completed
-- claimed_then_completed with the claim of a worker whose slots of one kind are full.
claimed AS ({{claim_jobs_skipping}})
{{claimed_and_completed_rows}};

-- part: claimed_and_completed_rows
SELECT claimed.*, NULL::bigint[] AS completed FROM claimed
UNION ALL
SELECT claimed.*, ARRAY(SELECT id FROM completed)
FROM (SELECT) AS acknowledged LEFT JOIN claimed ON false;

-- name: retry_job
-- Put a failed job back to 'ready' after `delay_seconds`, appending the error; fenced. A job
-- whose abort was requested is never retried (no row: the worker dead-letters it as aborted).
-- The delay counts from this statement (statement_timestamp(), the flow claim's clock), not
-- from its transaction's start: in a transaction older than the delay (run_jobs() in a
-- TestCase) a job with a flow key was due again at once.
UPDATE pgjobs_job AS j
SET status = 'ready',
    run_after = statement_timestamp() + %(delay_seconds)s * interval '1 second',
    errors = j.errors || %(error)s::jsonb,
    claim_token = NULL,
    lease_expires_at = NULL,
    worker = '',
    {{count_unrecorded_start}}
WHERE j.id = %(id)s AND j.claim_token = %(token)s::uuid AND j.status = 'running'
  AND j.abort_requested_at IS NULL
RETURNING j.id;

-- name: dead_letter_job
-- Move one job to pgjobs_deadletter in one statement, appending the final error; fenced.
WITH moved AS (
    DELETE FROM pgjobs_job
    WHERE id = %(id)s AND claim_token = %(token)s::uuid AND status = 'running'
    RETURNING *, %(reason)s::text AS reason, %(error_type)s::text AS error_type,
              %(error)s::jsonb AS error, started_at IS NULL AS unrecorded_start
),
{{fail_workflows}}
{{dead_letter_moved}};

-- name: dead_letter_aborted
-- Move one job whose attempt ended as aborted to pgjobs_deadletter (error type 'Aborted'), with
-- a reason naming who requested the abort, or saying the job raised Aborted itself; fenced.
WITH moved AS (
    DELETE FROM pgjobs_job
    WHERE id = %(id)s AND claim_token = %(token)s::uuid AND status = 'running'
    RETURNING *,
              CASE WHEN abort_requested_at IS NULL
                   THEN 'aborted: the job raised Aborted'
                   ELSE 'aborted at the request of ' || COALESCE(abort_requested_by, 'unknown')
                        || ' (' || to_char(abort_requested_at AT TIME ZONE 'UTC',
                                           'YYYY-MM-DD HH24:MI:SS') || ' UTC)'
              END || ': ' || %(summary)s::text AS reason,
              'Aborted'::text AS error_type, %(error)s::jsonb AS error,
              started_at IS NULL AS unrecorded_start
),
{{fail_workflows}}
{{dead_letter_moved}};

-- part: dead_letter_moved
-- Insert the rows of the CTE `moved` (deleted pgjobs_job rows plus `reason`, `error_type`,
-- `error`, a one-element jsonb array appended to their errors, and `unrecorded_start`: the
-- attempt ending was a held job's whose start was not recorded yet, set here) into
-- pgjobs_deadletter.
INSERT INTO pgjobs_deadletter (job_id, name, queue, priority, args, kwargs, attempts,
                               max_attempts, unique_key, waiting_key, timeout, reason,
                               error_type, errors, created_at, started_at, first_started_at,
                               failed_at, keep_result, task_backend, replayed_from, repairs,
                               version, workflow_id, workflow_step, workflow_member,
                               flow_key)
SELECT id, name, queue, priority, args, kwargs, attempts, max_attempts,
       unique_key, kept_waiting_key, timeout, reason, error_type, errors || error, created_at,
       CASE WHEN unrecorded_start THEN now() ELSE started_at END,
       COALESCE(first_started_at, started_at, CASE WHEN unrecorded_start THEN now() END),
       now(), keep_result, task_backend, replayed_from, repairs, version, workflow_id,
       workflow_step, workflow_member, flow_key
FROM moved
RETURNING id

-- part: restore_waiting_keys
-- The rows of the CTE `back` (ids of jobs this statement puts back to 'ready' unstarted) that
-- take their key of the scope 'waiting' back, as they held it before the claim: one per key,
-- never a job that failed before (a retry holds no key), and only when no waiting job holds the
-- key now (pgjobs_job_waiting_key; a job enqueued meanwhile keeps it, the returned one then
-- waits without a key). A guard in the statement, not ON CONFLICT: an UPDATE that would break
-- the unique index fails whole.
SELECT DISTINCT ON (j.kept_waiting_key) j.id
FROM pgjobs_job AS j
JOIN back USING (id)
WHERE j.kept_waiting_key IS NOT NULL AND j.errors = '[]'::jsonb
  AND NOT EXISTS (SELECT FROM pgjobs_job AS w WHERE w.waiting_key = j.kept_waiting_key)
ORDER BY j.kept_waiting_key, j.id

-- part: fail_workflows
-- CTEs after `moved` (jobs leaving for the dead-letter table, with their `reason`): a workflow
-- one of them belongs to fails with that reason, and its later steps (still 'blocked') are
-- cancelled (end_workflows). The other jobs of the failed step (a group's members) run on and
-- are counted; requeueing the dead letter (requeue_dead_letters) resumes the workflow.
ended AS (
    SELECT workflow_id, workflow_step, name, id, 'failed' AS outcome,
           'was dead-lettered: ' || reason AS reason
    FROM moved WHERE workflow_id IS NOT NULL
),
{{end_workflows}}

-- part: end_workflows
-- CTEs after `ended` (steps of workflows that will not succeed: their workflow, step, name,
-- id, the workflow's new state `outcome`, and what happened, `reason`): each running workflow
-- among them ends in that state, its reason naming the first of its steps ended, and its later
-- steps (still 'blocked') are cancelled. The other jobs of the ended step (a group's members)
-- run on and are counted, releasing nothing: the step after a group (its callback) never runs.
-- Every workflow among them is written, whatever its state in this statement's snapshot (a
-- workflow not running keeps its state): a requeue resuming one (a failed workflow made
-- running) holds its row until it commits, and this update waits for it and then ends it on
-- the row it committed. Filtered on the snapshot's state, a step dead-lettered while a resume
-- was committing left the workflow running with that step in the dead letters.
ended_workflows AS (
    UPDATE pgjobs_workflow AS w
    SET state = CASE WHEN w.state = 'running' THEN e.outcome ELSE w.state END,
        finished_at = CASE WHEN w.state = 'running' THEN now() ELSE w.finished_at END,
        reason = CASE WHEN w.state = 'running'
                      THEN 'step ' || e.workflow_step || ' (' || e.name || ' #' || e.id || ') '
                           || e.reason
                      ELSE w.reason END
    FROM (SELECT DISTINCT ON (workflow_id) workflow_id, workflow_step, name, id, outcome, reason
          FROM ended ORDER BY workflow_id, id) AS e
    WHERE w.id = e.workflow_id
    RETURNING w.id, w.finished_at = now() AS ended_here
),
cancelled_steps AS (
    -- Joined to ended_workflows, so that the workflows' rows are locked (and a resume holding
    -- one waited for) before any step's row, as every statement of a workflow locks them; an
    -- unused CTE runs at the end, after the ones declared below it, and locked the steps
    -- first (a deadlock with a requeue resuming the workflow). 'cancelled' too, of a workflow
    -- ended here: a step the snapshot shows cancelled may have been made waiting again
    -- ('blocked') by the resume that was waited for; PostgreSQL checks the condition again on
    -- the row that resume committed, so it is cancelled, and a step the resume made ready (no
    -- longer matching) is left to run. On 'blocked' alone, such a step stayed blocked under
    -- the failed workflow, which was then never pruned.
    UPDATE pgjobs_job AS j
    SET status = 'cancelled'
    FROM ended_workflows AS e
    WHERE j.workflow_id = e.id
      AND (j.status = 'blocked' OR (j.status = 'cancelled' AND e.ended_here))
      AND j.id NOT IN (SELECT id FROM ended)
    RETURNING j.id
)

-- part: stop_workflow_steps
-- CTEs after `targets` (the ids of jobs an operator cancels, with `%(reason)s`: by whom): the
-- waiting steps of workflows among them (ready or blocked) are not deleted but cancelled, and
-- their workflows end as aborted (end_workflows). Their workflow rows are locked first, in id
-- order, as the statements that complete steps lock them (advance_workflows), so the two never
-- deadlock: the release of a step waits for the cancel, or the cancel for the release, and then
-- cancels the job it made ready.
step_workflows AS (
    SELECT w.id FROM pgjobs_workflow AS w
    WHERE w.id IN (SELECT j.workflow_id FROM pgjobs_job AS j
                   WHERE j.id IN (SELECT id FROM targets) AND j.workflow_id IS NOT NULL)
    ORDER BY w.id
    FOR UPDATE
),
stopped AS (
    UPDATE pgjobs_job AS j
    SET status = 'cancelled'
    WHERE j.id IN (SELECT id FROM targets) AND j.workflow_id IS NOT NULL
      AND j.status IN ('ready', 'blocked')
      AND (SELECT count(*) FROM step_workflows) >= 0
    RETURNING j.id, j.workflow_id, j.workflow_step, j.name
),
ended AS (
    SELECT workflow_id, workflow_step, name, id, 'aborted' AS outcome,
           'was ' || %(reason)s::text AS reason
    FROM stopped
),
{{end_workflows}}

-- name: release_jobs
-- Hand claimed-but-unstarted jobs back without spending their attempt (graceful shutdown):
-- the claim numbered it, the hand-back takes the number back; a job of the scope 'waiting'
-- takes its key back (restore_waiting_keys).
WITH back AS (
    SELECT j.id
    FROM pgjobs_job AS j
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS handed(id, token) ON j.id = handed.id
    WHERE j.claim_token = handed.token AND j.status = 'running'
),
keyed AS ({{restore_waiting_keys}})
UPDATE pgjobs_job AS j
SET status = 'ready', attempts = j.attempts - 1,
    claim_token = NULL, lease_expires_at = NULL, worker = '',
    waiting_key = CASE WHEN j.id IN (SELECT id FROM keyed) THEN j.kept_waiting_key END
FROM back
WHERE j.id = back.id
RETURNING j.id;

-- name: defer_unknown_jobs
-- Hand back claimed jobs this worker does not know (a later release may), attempt not spent and
-- start forgotten, due again `delay` seconds from now: only those enqueued less than
-- `grace_seconds` ago (UNKNOWN_JOB_GRACE_SECONDS); the others are not returned (dead-lettered).
-- A job of the scope 'waiting' takes its key back (restore_waiting_keys).
WITH back AS (
    SELECT j.id
    FROM pgjobs_job AS j
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS handed(id, token) ON j.id = handed.id
    WHERE j.claim_token = handed.token AND j.status = 'running'
      AND j.created_at > now() - %(grace_seconds)s * interval '1 second'
),
keyed AS ({{restore_waiting_keys}})
UPDATE pgjobs_job AS j
SET status = 'ready', attempts = j.attempts - 1,
    run_after = now() + %(delay)s * interval '1 second',
    started_at = NULL,
    first_started_at = CASE WHEN j.first_started_at = j.started_at THEN NULL
                            ELSE j.first_started_at END,
    claim_token = NULL, lease_expires_at = NULL, worker = '',
    waiting_key = CASE WHEN j.id IN (SELECT id FROM keyed) THEN j.kept_waiting_key END
FROM back
WHERE j.id = back.id
RETURNING j.id;

-- name: extend_leases
-- Heartbeat: push the lease of every job a worker holds. One row per held job says whether it
-- was extended (`kept`), whether an abort is requested (how a worker that does not LISTEN
-- learns), and, for a job not extended, whether another claim has it now (`taken`: its row is
-- there with another claim token or none, i.e. it was rescued). A job neither kept nor taken has
-- ended under this claim: a job that completes in its own transaction commits that on its
-- executor's thread before the dispatcher hears of it, and is not a lost lease. `taken` reads
-- the statement's snapshot (a rescue committed during it is seen by the next heartbeat) and is
-- looked up only for the jobs not extended. The held jobs are found by their key, one lookup
-- each: the status check is written `IS TRUE` so that no partial index of running jobs can
-- serve it. Written plainly, the planner read every running job of every worker through the
-- lease index and hashed them to find its own (12,026 buffers for 200 held jobs among 10,000
-- running: 11.5 ms a heartbeat, growing with the workers; by key, 2,810 and 3.7 ms, most of it
-- the leases written).
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(lease_seconds)s::float8[])
        AS held(id, token, lease_seconds)
), extended AS (
    UPDATE pgjobs_job AS j
    SET lease_expires_at = now() + held.lease_seconds * interval '1 second'
    FROM held
    WHERE j.id = held.id AND j.claim_token = held.token AND (j.status = 'running') IS TRUE
    RETURNING j.id, j.abort_requested_at IS NOT NULL AS abort_requested
)
SELECT held.id, extended.id IS NOT NULL AS kept,
       coalesce(extended.abort_requested, false) AS abort_requested,
       CASE WHEN extended.id IS NULL THEN EXISTS (
           SELECT FROM pgjobs_job AS j
           WHERE j.id = held.id AND j.claim_token IS DISTINCT FROM held.token
       ) ELSE false END AS taken
FROM held
LEFT JOIN extended ON extended.id = held.id;

-- name: rescue_expired
-- Jobs whose lease expired (their worker died or hung). A job whose start was recorded goes
-- back to 'ready' with an error entry, or to the dead-letter table when that was its last
-- attempt; a held job whose start was not (`started_at` NULL) goes back with its attempt
-- given back (max_attempts raised by one: its attempt number stays used, so no number ever runs
-- twice, and its budget is whole), no error, its place in line kept, marked
-- `returned_unstarted` for good (from then on its start is always recorded before it runs:
-- a job that kills its worker as it starts gets one start unrecorded at most, then spends its
-- attempts); one of the scope 'waiting' takes its key back (restore_waiting_keys). A
-- job whose abort was requested is dead-lettered as aborted (never run again). One statement;
-- SKIP LOCKED lets several workers run it at once. `flow_swept`: a flow key with ready jobs that
-- a flow claim marked idle (`ready_at` NULL) or due too late while the enqueue of one was not
-- yet committed is made due again (docs/explanation/flow-control.md#the-due-hint).
WITH expired AS (
    SELECT id, started_at IS NOT NULL AS started,
           (started_at IS NOT NULL AND attempts >= max_attempts)
               OR abort_requested_at IS NOT NULL AS exhausted,
           jsonb_build_array(jsonb_build_object(
               'at', now(), 'attempt', attempts, 'type', 'LeaseExpired',
               'message', 'lease expired while running on worker ' || worker,
               'traceback', '', 'worker', worker)) AS error
    FROM pgjobs_job
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM pgjobs_job AS j
    USING expired
    WHERE j.id = expired.id AND expired.exhausted
    RETURNING j.*,
              CASE WHEN j.abort_requested_at IS NULL
                   THEN 'attempts exhausted: the lease of the last attempt expired '
                        '(worker died or hung)'
                   ELSE 'aborted at the request of ' || COALESCE(j.abort_requested_by, 'unknown')
                        || ': the lease expired (worker died or hung) before the job stopped'
              END AS reason,
              CASE WHEN j.abort_requested_at IS NULL THEN 'LeaseExpired' ELSE 'Aborted' END
                  AS error_type,
              CASE WHEN expired.started THEN expired.error ELSE '[]'::jsonb END AS error,
              false AS unrecorded_start
),
dead_lettered AS ({{dead_letter_moved}}),
back AS (SELECT id FROM expired WHERE NOT expired.started AND NOT expired.exhausted),
keyed AS ({{restore_waiting_keys}}),
{{fail_workflows}},
requeued AS (
    UPDATE pgjobs_job AS j
    SET status = 'ready', claim_token = NULL, lease_expires_at = NULL, worker = '',
        waiting_key = CASE WHEN j.id IN (SELECT id FROM keyed) THEN j.kept_waiting_key END,
        run_after = CASE WHEN expired.started THEN now() ELSE j.run_after END,
        errors = CASE WHEN expired.started THEN j.errors || expired.error ELSE j.errors END,
        max_attempts = j.max_attempts + (NOT expired.started)::int,
        returned_unstarted = j.returned_unstarted OR NOT expired.started
    FROM expired
    WHERE j.id = expired.id AND NOT expired.exhausted
    RETURNING j.id, expired.started
),
flow_swept AS (
    -- idle keys with a ready job, and keys due later than a ready job of theirs is (a claim
    -- that could not see that job set the key to its next visible one: a retry's, a delayed
    -- job's): due now, or at the next token of a rate-limited key
    UPDATE pgjobs_flow_key AS k
    SET ready_at = GREATEST(now(), CASE WHEN k.rate IS NULL OR k.tokens >= 1 THEN now()
        ELSE k.refilled_at + (1 - k.tokens) / k.rate * interval '1 second' END)
    WHERE (k.ready_at IS NULL
           AND EXISTS (SELECT 1 FROM pgjobs_job AS j
                       WHERE j.flow_key = k.key AND j.status = 'ready'))
       OR (k.ready_at > now()
           AND k.ready_at > CASE WHEN k.rate IS NULL OR k.tokens >= 1 THEN now()
               ELSE k.refilled_at + (1 - k.tokens) / k.rate * interval '1 second' END
           AND EXISTS (SELECT 1 FROM pgjobs_job AS j
                       WHERE j.flow_key = k.key AND j.status = 'ready' AND j.run_after <= now()))
)
SELECT (SELECT count(*) FROM requeued WHERE started) AS requeued,
       (SELECT count(*) FROM dead_lettered) AS dead_lettered,
       (SELECT count(*) FROM requeued WHERE NOT started) AS returned;

-- name: prune_succeeded
-- Delete up to `limit` successful jobs finished more than `keep_seconds` ago, or, for jobs that
-- kept their result, `keep_results_seconds` ago. The first condition (the shorter of the two)
-- is the range read from pgjobs_job_finished_idx; the second picks each row's own period.
DELETE FROM pgjobs_job
WHERE id IN (
    SELECT id FROM pgjobs_job
    WHERE status = 'successful'
      AND finished_at < now() - LEAST(%(keep_seconds)s::float8, %(keep_results_seconds)s::float8)
                                * interval '1 second'
      AND finished_at < now() - (CASE WHEN keep_result THEN %(keep_results_seconds)s::float8
                                      ELSE %(keep_seconds)s::float8 END) * interval '1 second'
    LIMIT %(limit)s
)
RETURNING id;

-- name: set_job_progress
-- A running job's progress (replaced) and metadata (merged into what it set before), written by
-- the job itself (progress.py). Fenced by the claim's token: a job whose claim was lost writes
-- nothing. The primary key finds the row; nothing else is read.
UPDATE pgjobs_job
SET progress = COALESCE(%(progress)s::jsonb, progress),
    metadata = CASE WHEN %(metadata)s::jsonb IS NULL THEN metadata
                    ELSE COALESCE(metadata, '{}'::jsonb) || %(metadata)s::jsonb END
WHERE id = %(id)s AND claim_token = %(token)s::uuid AND status = 'running'
RETURNING id;

-- name: find_job_result
-- One job by id for get_result: its pgjobs_job row, or else its dead letter (status 'failed';
-- the newest, should it have failed more than once under this id), through pgjobs_dl_job_idx.
SELECT * FROM (
    (SELECT 0 AS source, id, name, queue, priority, args, kwargs, status, result, errors,
            attempts, max_attempts, created_at, run_after, started_at, first_started_at,
            finished_at, worker, keep_result, task_backend, progress, metadata
     FROM pgjobs_job WHERE id = %(id)s)
    UNION ALL
    (SELECT 1, job_id, name, queue, priority, args, kwargs, 'failed', NULL, errors, attempts,
            max_attempts, created_at, NULL, started_at, first_started_at, failed_at, '',
            keep_result, task_backend, NULL::jsonb, NULL::jsonb
     FROM pgjobs_deadletter WHERE job_id = %(id)s
     ORDER BY failed_at DESC, id DESC
     LIMIT 1)
) AS found
ORDER BY source
LIMIT 1;

-- name: paused_queues
-- Names of the queues operators paused.
SELECT name FROM pgjobs_queue WHERE paused;

-- name: set_queue_paused
-- Pause or resume a queue (creates its pgjobs_queue row on first use).
INSERT INTO pgjobs_queue (name, paused, changed_at)
VALUES (%(name)s, %(paused)s, now())
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, changed_at = now()
RETURNING name;

-- name: register_worker
-- Add (or refresh) a worker in the registry.
INSERT INTO pgjobs_worker (id, hostname, pid, queues, concurrency, started_at, last_seen_at)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s::jsonb, %(concurrency)s, now(), now())
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: touch_worker
-- Worker heartbeat in the registry; also forgets workers silent for `forget_seconds` (their
-- ids returned).
WITH touched AS (
    UPDATE pgjobs_worker SET last_seen_at = now() WHERE id = %(id)s RETURNING id
)
DELETE FROM pgjobs_worker
WHERE last_seen_at < now() - %(forget_seconds)s * interval '1 second'
  AND id NOT IN (SELECT id FROM touched)
RETURNING id;

-- name: live_workers
-- The workers heard from within `alive_seconds`, with the queues each serves (an empty list:
-- every queue). The registry holds one row per worker process.
SELECT id, hostname, queues
FROM pgjobs_worker
WHERE last_seen_at >= now() - %(alive_seconds)s * interval '1 second'
ORDER BY id;

-- name: unregister_worker
-- Remove a worker from the registry when it stops.
DELETE FROM pgjobs_worker WHERE id = %(id)s;

-- name: cancel_backends
-- Cancel the statement a timed-out job is running (its executor's connections, `pids`), so a
-- job stuck in a query returns; the session stays. Returns how many were signalled.
SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) AS cancelled
FROM unnest(%(pids)s::int[]) AS pid;

-- name: terminate_backends
-- End the server processes of jobs a stopping worker abandons (their statements and locks go
-- with them); `pids` are the worker's own executor connections. Returns how many were ended.
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS ended
FROM unnest(%(pids)s::int[]) AS pid;

-- name: dead_letter_flow_keys
-- The flow keys of the dead letters `ids` with their job names: what a requeue gives
-- flow.requeued_key_limits, to write a key the pruner deleted with its limits.
SELECT DISTINCT flow_key, name FROM pgjobs_deadletter
WHERE id = ANY(%(ids)s::bigint[]) AND flow_key IS NOT NULL;

-- part: requeue_flow_keys
-- CTEs after `inserted` (requeued jobs: queue, run_after, flow_key): each flow key among them
-- is told a job of it is due (`ready_at` only made earlier), or written again when the pruner
-- deleted it, with a full bucket and the limits its jobs' code gives it now (parallel arrays
-- `flow_keys`, `flow_limits`, `flow_rates`, `flow_bursts`: flow.requeued_key_limits); a key
-- missing from them, one job at a time (none for a fairness key). Written again with no
-- limit, a rate-limited key ran its requeued jobs one after the other as fast as they ended.
-- A key the pruner is deleting meanwhile is waited for, then inserted again (ON CONFLICT DO
-- UPDATE tries the insert again when the row it waited for was deleted).
-- `flow_woken`: the flow claims of their queues' workers (flow.py).
flow_keys_due AS (
    INSERT INTO pgjobs_flow_key AS k (key, concurrency_limit, rate, burst, tokens, refilled_at,
                                      ready_at)
    SELECT i.flow_key,
           CASE WHEN l.key IS NOT NULL THEN l.concurrency_limit
                WHEN left(i.flow_key, 5) = 'fair:' THEN NULL ELSE 1 END,
           l.rate, l.burst, COALESCE(l.burst, 0), now(), min(i.run_after)
    FROM inserted AS i
    LEFT JOIN unnest(%(flow_keys)s::text[], %(flow_limits)s::int[], %(flow_rates)s::float8[],
                     %(flow_bursts)s::float8[]) AS l(key, concurrency_limit, rate, burst)
           ON l.key = i.flow_key
    WHERE i.flow_key IS NOT NULL
    GROUP BY i.flow_key, l.key, l.concurrency_limit, l.rate, l.burst
    ON CONFLICT (key) DO UPDATE
    SET ready_at = LEAST(COALESCE(k.ready_at, EXCLUDED.ready_at), EXCLUDED.ready_at)
),
flow_woken AS (
    SELECT pg_notify('pgjobs', 'flow:' || queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE flow_key IS NOT NULL) AS queues
)

-- name: requeue_dead_letters
-- Move dead letters back to pgjobs_job as fresh 'ready' jobs (attempts reset, error history
-- kept), in one statement: each dead letter disappears exactly when its job reappears, and
-- workers listening on its queue are woken (as run_jobs_now does).
-- Concurrent requeues of the same row: the second DELETE finds nothing, so one job results.
-- A dead letter whose unique_key is held by a ready or running job stays where it is (requeueing
-- it would break the key's promise), and so do all but the newest of the selected dead letters
-- sharing a key: the NOT EXISTS cannot see rows this statement inserts, so `picked` keeps one per
-- key. Callers report the ids that did not come back. A job inserted with the same key by a
-- concurrent transaction still makes the INSERT fail on pgjobs_job_unique_key_in_flight; the
-- whole statement then changes nothing (operations.requeue_dead_letters runs it again). The
-- same for a key of the scope 'waiting' (`waiting_key`): held by a waiting job, the dead letter
-- stays; requeued, the job waits holding its key again (pgjobs_job_waiting_key).
-- `spacing`: seconds between the jobs' due times, oldest dead letter first (0: all due now;
-- a staggered replay spreads them at an operator's rate). `previous_due` (NULL: none): the due
-- time of the last job of the replay's previous batch; the first job of this one is due `spacing`
-- after it (or now, when that has passed), so batch after batch keeps the rate. `requested_by`
-- (NULL: none) adds an entry to each job's audit trail (`repairs`): who, `action`, when. Returns
-- each job's due time.
WITH picked AS (
    SELECT id
    FROM (
        SELECT d.id, COALESCE(d.unique_key, d.waiting_key) AS key,
               row_number() OVER (PARTITION BY COALESCE(d.unique_key, d.waiting_key)
                                  ORDER BY d.failed_at DESC, d.id DESC) AS newest
        FROM pgjobs_deadletter AS d
        WHERE d.id = ANY(%(ids)s::bigint[])
          AND NOT EXISTS (
              SELECT 1 FROM pgjobs_job AS j
              WHERE j.unique_key = d.unique_key AND j.status IN ('ready', 'running')
          )
          AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS j WHERE j.waiting_key = d.waiting_key)
    ) AS candidates
    WHERE key IS NULL OR newest = 1
),
moved AS (
    DELETE FROM pgjobs_deadletter AS d
    USING picked
    WHERE d.id = picked.id
    RETURNING d.*
),
spaced AS (
    SELECT moved.*, row_number() OVER (ORDER BY failed_at, id) - 1 AS place FROM moved
),
inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, unique_key, waiting_key, kept_waiting_key, timeout,
                            created_at, worker, errors, keep_result, task_backend, replayed_from,
                            repairs, version, workflow_id, workflow_step, workflow_member,
                            flow_key)
    SELECT name, queue, priority, args, kwargs, 'ready',
           GREATEST(now(), %(previous_due)s::timestamptz
                           + %(spacing)s::float8 * interval '1 second')
           + place * %(spacing)s::float8 * interval '1 second', 0, max_attempts,
           unique_key, waiting_key, waiting_key, timeout, now(), '', errors, keep_result,
           task_backend, id,
           repairs || CASE WHEN %(requested_by)s::text IS NULL THEN '[]'::jsonb
                           ELSE jsonb_build_array(jsonb_build_object(
                               'at', to_char(now() AT TIME ZONE 'UTC',
                                             'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                               'by', %(requested_by)s::text, 'action', %(action)s::text,
                               'dead_letter', id, 'job_id', job_id)) END,
           version, workflow_id, workflow_step, workflow_member, flow_key
    FROM spaced
    RETURNING id, queue, run_after, flow_key
),
{{requeue_flow_keys}},
{{resume_workflows}},
woken AS (
    SELECT pg_notify('pgjobs', queue) FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT inserted.id, inserted.run_after
FROM inserted, (SELECT count(*) FROM woken) AS notified,
     (SELECT count(*) FROM flow_woken) AS flow_notified;

-- part: resume_workflows
-- CTEs after `moved` (dead letters leaving for pgjobs_job, with their workflow): the workflows
-- of requeued steps run again once none of their steps is left in the dead letters (a group
-- whose members were all dead-lettered resumes with the requeue of its last one; before, each
-- requeued member runs and is counted, the workflow stays failed): what was cancelled waits
-- again, the current step's jobs ready, the later steps blocked until the count releases them.
-- Only while every job its current step still counts on (`remaining`) is there to finish: a
-- member whose dead letter was deleted (by an operator, or pruned) never will, and resumed
-- without it the workflow waited as 'running' for ever; it stays failed, its requeued steps
-- run and are counted. Each step keeps its own due time: one enqueued for later (run_after,
-- delay) stays due then, one whose time has passed is due now (in line from the resume on),
-- and every other column (queue, priority, attempts...) is left as it was enqueued.
resumed AS (
    UPDATE pgjobs_workflow AS w
    SET state = 'running', reason = '', finished_at = NULL
    FROM (SELECT DISTINCT workflow_id FROM moved WHERE workflow_id IS NOT NULL) AS m
    WHERE w.id = m.workflow_id AND w.state IN ('failed', 'aborted')
      AND NOT EXISTS (SELECT 1 FROM pgjobs_deadletter AS d
                      WHERE d.workflow_id = w.id AND d.id NOT IN (SELECT id FROM moved))
      AND w.remaining <= (SELECT count(*) FROM pgjobs_job AS j
                          WHERE j.workflow_id = w.id AND j.workflow_step = w.step
                            AND j.status IN ('ready', 'running', 'blocked', 'cancelled'))
                         + (SELECT count(*) FROM moved AS again
                            WHERE again.workflow_id = w.id AND again.workflow_step = w.step)
    RETURNING w.id, w.step
),
uncancelled AS (
    UPDATE pgjobs_job AS j
    SET status = CASE WHEN j.workflow_step = r.step THEN 'ready' ELSE 'blocked' END,
        run_after = GREATEST(j.run_after, now())
    FROM resumed AS r
    WHERE j.workflow_id = r.id AND j.status = 'cancelled'
    RETURNING pg_notify('pgjobs', j.queue)
)

-- name: lock_dead_letter_workflows
-- The workflows of dead letters about to be requeued, locked in id order (as the statements
-- that complete steps lock them), in the requeue's transaction before its statement: that
-- statement's snapshot then shows what another requeue or failure of the same workflow
-- committed. Two requeues of a group's last two dead letters at once each saw the other's
-- dead letter in its own snapshot, and neither resumed the workflow: stuck for good.
SELECT w.id FROM pgjobs_workflow AS w
WHERE w.id IN (SELECT d.workflow_id FROM pgjobs_deadletter AS d
               WHERE d.id = ANY(%(ids)s::bigint[]) AND d.workflow_id IS NOT NULL)
ORDER BY w.id
FOR UPDATE;

-- name: lock_workflow
-- One workflow's row, locked in its abort's transaction before the abort's statement (see
-- lock_dead_letter_workflows): the abort then sees the jobs a resume committed meanwhile.
SELECT id FROM pgjobs_workflow WHERE id = %(id)s FOR UPDATE;

-- name: requeue_edited_dead_letter
-- Requeue one dead letter with new arguments (checked by the caller), in one statement: the dead
-- letter disappears exactly when its job appears, as in requeue_dead_letters. The new job links
-- back to the dead letter (`replayed_from`) and its audit trail (`repairs`) gains one entry: who
-- changed what, and when. A step of a workflow keeps its workflow, step and place, and its
-- workflow resumes as with requeue_dead_letters (resume_workflows). Its unique key (of either
-- scope: `unique_key`, or `waiting_key` held again as requeue_dead_letters does) is
-- `edited_key` when `new_key` (the job's unique_key function gave the old arguments the old
-- key: it gives the new ones theirs), else the dead letter's. No row: the dead letter is gone
-- (requeued or deleted by someone else), or that key is held by a ready or running job (a
-- waiting one: 'waiting'). The edit is also recorded in pgjobs_repair (`recorded`), by the same
-- statement: the dead letter is gone from here on and the job is deleted when it succeeds, so
-- the trail each carries ends with them; that row stays until the dead letters' retention by age
-- (prune_dead_letters).
WITH keyed AS (
    SELECT d.id,
           CASE WHEN d.unique_key IS NOT NULL
                THEN CASE WHEN %(new_key)s THEN %(edited_key)s::text ELSE d.unique_key END END
               AS unique_key,
           CASE WHEN d.waiting_key IS NOT NULL
                THEN CASE WHEN %(new_key)s THEN %(edited_key)s::text ELSE d.waiting_key END END
               AS waiting_key
    FROM pgjobs_deadletter AS d
    WHERE d.id = %(id)s
),
moved AS (
    DELETE FROM pgjobs_deadletter AS d
    USING keyed AS k
    WHERE d.id = %(id)s AND d.name = %(name)s AND k.id = d.id
      AND NOT EXISTS (
          SELECT 1 FROM pgjobs_job AS j
          WHERE j.unique_key = k.unique_key AND j.status IN ('ready', 'running')
      )
      AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS j WHERE j.waiting_key = k.waiting_key)
    RETURNING d.*, k.unique_key AS new_unique_key, k.waiting_key AS new_waiting_key
),
inserted AS (
    INSERT INTO pgjobs_job (name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, unique_key, waiting_key, kept_waiting_key, timeout,
                            created_at, worker, errors,
                            keep_result, task_backend, replayed_from, repairs, version,
                            workflow_id, workflow_step, workflow_member, flow_key)
    SELECT name, queue, priority, %(args)s::jsonb, %(kwargs)s::jsonb, 'ready', now(), 0,
           max_attempts, new_unique_key, new_waiting_key, new_waiting_key, timeout, now(), '',
           errors, keep_result, task_backend, id,
           repairs || jsonb_build_array(jsonb_build_object(
               'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
               'by', %(by)s::text, 'action', 'edit and requeue', 'dead_letter', id,
               'job_id', job_id, 'args_before', args, 'kwargs_before', kwargs,
               'args', %(args)s::jsonb, 'kwargs', %(kwargs)s::jsonb)),
           %(version)s::int, workflow_id, workflow_step, workflow_member, flow_key
    FROM moved
    RETURNING id, queue, run_after, flow_key
),
recorded AS (
    INSERT INTO pgjobs_repair (repaired_at, repaired_by, name, queue, dead_letter_id, job_id,
                               requeued_as, error_type, reason, args_before, kwargs_before, args,
                               kwargs)
    SELECT now(), %(by)s::text, moved.name, moved.queue, moved.id, moved.job_id, inserted.id,
           moved.error_type, moved.reason, moved.args, moved.kwargs, %(args)s::jsonb,
           %(kwargs)s::jsonb
    FROM moved, inserted  -- one row each, or none
    RETURNING id
),
{{requeue_flow_keys}},
{{resume_workflows}}
SELECT inserted.id, pg_notify('pgjobs', inserted.queue) IS NULL AS _notified
FROM inserted, (SELECT count(*) FROM flow_woken) AS flow_notified,
     (SELECT count(*) FROM recorded) AS repairs_recorded;

-- name: prune_dead_letters
-- Delete one bounded batch of dead letters past their retention: failed more than `max_age`
-- seconds ago, or beyond the newest `max_per_name` of their job name (NULL: no such limit);
-- oldest first, at most `limit` rows. One worker at a time without a session lock: the
-- transaction-level advisory lock is tried inside the statement (autocommit: released when it
-- ends); a worker that does not get it deletes nothing (`held` false). The rows deleted are
-- counted per queue in pgjobs_stat (`pruned`) by the same statement. Per name, the cutoff is
-- found through pgjobs_dl_name_idx (a loose scan of the names, then one probe each). The repair
-- records (pgjobs_repair) older than `max_age` go with them, at most `limit`, oldest first
-- (`repairs_pruned`); `max_per_name` does not apply to them: one is written per edit an
-- operator makes, not per failure.
WITH RECURSIVE gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtext('django_pgjobs.prune_dead_letters')) AS held
),
names(name) AS (
    (SELECT name FROM pgjobs_deadletter
     WHERE %(max_per_name)s::int IS NOT NULL AND (SELECT held FROM gate)
     ORDER BY name LIMIT 1)
    UNION ALL
    SELECT (SELECT d.name FROM pgjobs_deadletter AS d WHERE d.name > names.name
            ORDER BY d.name LIMIT 1)
    FROM names WHERE names.name IS NOT NULL
),
cutoffs AS (
    SELECT names.name, newest_kept.failed_at, newest_kept.id
    FROM names
    CROSS JOIN LATERAL (
        SELECT d.failed_at, d.id FROM pgjobs_deadletter AS d
        WHERE d.name = names.name
        ORDER BY d.failed_at DESC, d.id DESC
        OFFSET %(max_per_name)s::int LIMIT 1
    ) AS newest_kept
    WHERE names.name IS NOT NULL
),
over_count AS (
    SELECT beyond.id, beyond.failed_at
    FROM cutoffs
    CROSS JOIN LATERAL (
        SELECT d.id, d.failed_at FROM pgjobs_deadletter AS d
        WHERE d.name = cutoffs.name AND (d.failed_at, d.id) <= (cutoffs.failed_at, cutoffs.id)
        ORDER BY d.failed_at, d.id
        LIMIT %(limit)s::int
    ) AS beyond
),
too_old AS (
    SELECT d.id, d.failed_at FROM pgjobs_deadletter AS d
    WHERE %(max_age)s::float8 IS NOT NULL AND (SELECT held FROM gate)
      AND d.failed_at < now() - %(max_age)s::float8 * interval '1 second'
    ORDER BY d.failed_at, d.id
    LIMIT %(limit)s::int
),
doomed AS (
    SELECT id FROM (SELECT * FROM too_old UNION SELECT * FROM over_count) AS both_kinds
    ORDER BY failed_at, id
    LIMIT %(limit)s::int
),
deleted AS (
    DELETE FROM pgjobs_deadletter AS d USING doomed WHERE d.id = doomed.id RETURNING d.queue
),
repairs_pruned AS (
    DELETE FROM pgjobs_repair AS r
    WHERE r.id IN (SELECT old.id FROM pgjobs_repair AS old
                   WHERE %(max_age)s::float8 IS NOT NULL AND (SELECT held FROM gate)
                     AND old.repaired_at < now() - %(max_age)s::float8 * interval '1 second'
                   ORDER BY old.repaired_at, old.id
                   LIMIT %(limit)s::int)
    RETURNING r.id
),
counted AS (
    INSERT INTO pgjobs_stat (queue, minute, succeeded, retried, dead_lettered, wait_buckets,
                             pruned)
    SELECT queue, date_trunc('minute', now()), 0, 0, 0, '{}'::int[], count(*)
    FROM deleted GROUP BY queue ORDER BY queue
    ON CONFLICT (queue, minute) DO UPDATE SET pruned = pgjobs_stat.pruned + EXCLUDED.pruned
    RETURNING pruned
)
SELECT (SELECT held FROM gate) AS held, (SELECT count(*) FROM deleted) AS pruned,
       (SELECT count(*) FROM counted) AS queues,
       (SELECT count(*) FROM repairs_pruned) AS repairs_pruned;

-- name: delete_dead_letters
-- Delete dead letters for good.
DELETE FROM pgjobs_deadletter WHERE id = ANY(%(ids)s::bigint[]) RETURNING id;

-- name: run_jobs_now
-- Make waiting jobs (scheduled or retrying) due now, and wake the workers listening on their
-- queues (one notification per queue; sent whatever LISTEN_NOTIFY says: an operator action is
-- rare, and a notification nobody listens to costs nothing).
-- Their flow keys are told they are due now (the flow claim looks at due keys only).
WITH due AS (
    UPDATE pgjobs_job SET run_after = now()
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'ready'
    RETURNING id, queue, flow_key
),
keys_due AS (
    UPDATE pgjobs_flow_key AS k SET ready_at = now()
    WHERE k.key IN (SELECT flow_key FROM due WHERE flow_key IS NOT NULL)
      AND (k.ready_at IS NULL OR k.ready_at > now())
),
woken AS (
    SELECT pg_notify('pgjobs', queue) FROM (SELECT DISTINCT queue FROM due) AS queues
    UNION ALL
    SELECT pg_notify('pgjobs', 'flow:' || queue)
    FROM (SELECT DISTINCT queue FROM due WHERE flow_key IS NOT NULL) AS flow_queues
)
SELECT due.id FROM due, (SELECT count(*) FROM woken) AS notified;

-- name: cancel_jobs
-- Cancel jobs that are still waiting (never a running one: its worker owns it): delete them,
-- or, a step of a workflow (ready or blocked), keep it as 'cancelled' and end its workflow as
-- aborted, `reason` saying by whom, its later steps cancelled (stop_workflow_steps).
WITH targets AS (SELECT unnest(%(ids)s::bigint[]) AS id),
{{stop_workflow_steps}},
deleted AS (
    DELETE FROM pgjobs_job
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'ready' AND workflow_id IS NULL
    RETURNING id
)
SELECT id FROM deleted UNION ALL SELECT id FROM stopped;

-- name: abort_jobs
-- Abort jobs: request the abort of running ones (kept: the first request's time and requester)
-- and wake the workers listening on pgjobs_abort (payload: the job ids, comma-separated; sent
-- at commit), and,
-- when `cancel_waiting`, cancel the ones still waiting (as cancel_jobs: a step of a workflow is
-- kept as 'cancelled' and its workflow aborted). Returns the ids of each.
-- The CTEs see one snapshot and touch disjoint rows; a job claimed or retried between that
-- snapshot and its row lock is in none, but in `eligible` (what the snapshot showed), and
-- operations.abort_jobs runs the statement again for it. The running rows are locked first
-- (the result lists `requested` first), then the workflows, as a completion locks them.
WITH eligible AS (
    SELECT id FROM pgjobs_job
    WHERE id = ANY(%(ids)s::bigint[])
      AND (status = 'running' OR (status IN ('ready', 'blocked') AND %(cancel_waiting)s))
),
targets AS (SELECT id FROM unnest(%(ids)s::bigint[]) AS id WHERE %(cancel_waiting)s),
{{stop_workflow_steps}},
cancelled AS (
    DELETE FROM pgjobs_job
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'ready' AND workflow_id IS NULL
      AND %(cancel_waiting)s
    RETURNING id
),
requested AS (
    UPDATE pgjobs_job
    SET abort_requested_at = COALESCE(abort_requested_at, now()),
        abort_requested_by = COALESCE(abort_requested_by, %(requested_by)s::text)
    WHERE id = ANY(%(ids)s::bigint[]) AND status = 'running'
    RETURNING id, worker
),
woken AS (
    -- one notification for up to 390 ids of one worker (comma-separated: 7,799 bytes at most,
    -- within NOTIFY's 8,000 whatever the ids), so a worker marks the held jobs of one abort
    -- together: sent one by one, the running step of an aborted workflow could stop on its own
    -- notice and its executor start a held step whose notice the worker had not yet taken
    SELECT pg_notify('pgjobs_abort', string_agg(id::text, ',' ORDER BY id))
    FROM (SELECT id, worker,
                 (row_number() OVER (PARTITION BY worker ORDER BY id) - 1) / 390 AS chunk
          FROM requested) AS r
    GROUP BY worker, chunk
)
SELECT ARRAY(SELECT id FROM requested) AS requested,
       ARRAY(SELECT id FROM cancelled UNION ALL SELECT id FROM stopped) AS cancelled,
       ARRAY(SELECT id FROM eligible) AS eligible, (SELECT count(*) FROM woken) AS notified;

-- name: abort_workflow
-- Abort a workflow (running, failed, or aborted with jobs left to stop: an operator cancelled
-- one step and the others of its group run on): it is marked aborted (with who asked) and its
-- waiting jobs (ready or blocked) are cancelled, the workflow row locked first (as a completion
-- locks it: a step released meanwhile is cancelled too). Its running jobs are asked to stop by
-- the next statements (workflow_running_jobs, then abort_jobs), which see what was claimed while
-- this one ran. A job that finishes anyway is counted but releases nothing.
WITH aborted AS (
    UPDATE pgjobs_workflow
    SET state = 'aborted', finished_at = now(),
        reason = 'aborted at the request of ' || %(requested_by)s::text
    WHERE id = %(id)s
      AND (state IN ('running', 'failed')
           OR (state = 'aborted' AND EXISTS (SELECT 1 FROM pgjobs_job
                                             WHERE workflow_id = %(id)s
                                               AND (status = 'ready'
                                                    OR (status = 'running'
                                                        AND abort_requested_at IS NULL)))))
    RETURNING id
),
cancelled AS (
    UPDATE pgjobs_job
    SET status = 'cancelled'
    WHERE workflow_id = %(id)s AND status IN ('ready', 'blocked')
      AND EXISTS (SELECT 1 FROM aborted)
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM aborted) AS aborted, (SELECT count(*) FROM cancelled) AS cancelled;

-- name: workflow_running_jobs
-- The ids of a workflow's running jobs (held ones included), in a snapshot of their own.
SELECT id FROM pgjobs_job WHERE workflow_id = %(id)s AND status = 'running' ORDER BY id;

-- name: prune_workflows
-- Delete one bounded batch (`limit`) of workflows finished more than `keep_seconds` ago, oldest
-- first, with their steps that never ran ('cancelled'): only those none of whose jobs is left
-- but cancelled ones (a job still running, or kept as successful, keeps its workflow; it goes
-- with the job's own retention) and none of whose steps is a dead letter (requeueing it resumes
-- the workflow: the workflow stays as long as the dead letter; each run looks such workflows over
-- again, about 0.2 s per 100,000 of them, so DEAD_LETTER_MAX_AGE_SECONDS bounds that). A dead
-- letter requeued meanwhile is still seen by this statement's snapshot. Several workers prune at
-- once: SKIP LOCKED.
WITH doomed AS (
    SELECT w.id FROM pgjobs_workflow AS w
    WHERE w.finished_at < now() - %(keep_seconds)s::float8 * interval '1 second'
      AND w.state <> 'running'
      AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS j
                      WHERE j.workflow_id = w.id AND j.status <> 'cancelled')
      AND NOT EXISTS (SELECT 1 FROM pgjobs_deadletter AS d WHERE d.workflow_id = w.id)
    ORDER BY w.finished_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
),
steps AS (
    DELETE FROM pgjobs_job AS j USING doomed
    WHERE j.workflow_id = doomed.id AND j.status = 'cancelled'
    RETURNING j.id
),
deleted AS (
    DELETE FROM pgjobs_workflow AS w USING doomed WHERE w.id = doomed.id RETURNING w.id
)
SELECT (SELECT count(*) FROM deleted) AS workflows, (SELECT count(*) FROM steps) AS jobs;

-- name: count_prunable
-- What `pgjobs prune --dry-run` reports: how many rows prune_succeeded, prune_workflows and
-- prune_dead_letters (dead letters, and repair records past their age) would delete now, by
-- their conditions (no LIMIT, no lock, no write). A dead letter counts once when it is both
-- too old and beyond the newest `max_per_name` of its name.
-- Reads every dead letter once (the per-name ranking); a one-off read for an operator, never the
-- workers'.
SELECT
    (SELECT count(*) FROM pgjobs_job
     WHERE status = 'successful'
       AND finished_at < now() - LEAST(%(keep_seconds)s::float8, %(keep_results_seconds)s::float8)
                                 * interval '1 second'
       AND finished_at < now() - (CASE WHEN keep_result THEN %(keep_results_seconds)s::float8
                                       ELSE %(keep_seconds)s::float8 END) * interval '1 second')
        AS succeeded,
    (SELECT count(*) FROM pgjobs_workflow AS w
     WHERE w.finished_at < now() - %(keep_workflows_seconds)s::float8 * interval '1 second'
       AND w.state <> 'running'
       AND NOT EXISTS (SELECT 1 FROM pgjobs_job AS j
                       WHERE j.workflow_id = w.id AND j.status <> 'cancelled')
       AND NOT EXISTS (SELECT 1 FROM pgjobs_deadletter AS d WHERE d.workflow_id = w.id))
        AS workflows,
    (SELECT count(*) FROM (
         SELECT d.failed_at,
                row_number() OVER (PARTITION BY d.name ORDER BY d.failed_at DESC, d.id DESC)
                    AS place
         FROM pgjobs_deadletter AS d
         WHERE %(max_age)s::float8 IS NOT NULL OR %(max_per_name)s::int IS NOT NULL
     ) AS ranked
     WHERE (%(max_age)s::float8 IS NOT NULL
            AND ranked.failed_at < now() - %(max_age)s::float8 * interval '1 second')
        OR (%(max_per_name)s::int IS NOT NULL AND ranked.place > %(max_per_name)s::int))
        AS dead_letters,
    (SELECT count(*) FROM pgjobs_repair
     WHERE %(max_age)s::float8 IS NOT NULL
       AND repaired_at < now() - %(max_age)s::float8 * interval '1 second')
        AS repairs;

-- Statements of the admin dashboard and the per-minute queue statistics (pgjobs_stat).

-- name: record_queue_stats
-- Add one worker's counts of the last few seconds to the current minute of each queue. One
-- statement per flush; queues arrive sorted so concurrent workers lock rows in the same order.
INSERT INTO pgjobs_stat (queue, minute, succeeded, retried, dead_lettered, wait_buckets)
SELECT q, date_trunc('minute', now()), s, r, d, w::int[]
FROM unnest(%(queues)s::text[], %(succeeded)s::int[], %(retried)s::int[], %(dead_lettered)s::int[],
            %(waits)s::text[]) AS counts(q, s, r, d, w)
ON CONFLICT (queue, minute) DO UPDATE
SET succeeded = pgjobs_stat.succeeded + EXCLUDED.succeeded,
    retried = pgjobs_stat.retried + EXCLUDED.retried,
    dead_lettered = pgjobs_stat.dead_lettered + EXCLUDED.dead_lettered,
    wait_buckets = ARRAY(
        SELECT COALESCE(a, 0) + COALESCE(b, 0)
        FROM unnest(pgjobs_stat.wait_buckets, EXCLUDED.wait_buckets) AS pair(a, b)
    );

-- name: prune_queue_stats
-- Forget per-minute statistics older than `keep_seconds`.
DELETE FROM pgjobs_stat WHERE minute < now() - %(keep_seconds)s * interval '1 second';

-- name: queue_stats_since
-- Per-minute statistics of every queue since `since` (the dashboard's rates and chart).
SELECT queue, minute, succeeded, retried, dead_lettered, wait_buckets, pruned
FROM pgjobs_stat
WHERE minute >= %(since)s
ORDER BY minute, queue;

-- name: live_jobs_by_queue
-- Ready and running jobs per queue, split into the operator views of states.View, and the
-- leases past expiry. Reads every live row (never retained history): the dashboard only runs it
-- while pgjobs_job is small (overview.py, EXACT_COUNT_ROWS).
SELECT queue,
       count(*) FILTER (WHERE status = 'ready' AND attempts = 0 AND run_after <= now()) AS due,
       count(*) FILTER (WHERE status = 'ready' AND attempts = 0 AND run_after > now())
           AS scheduled,
       count(*) FILTER (WHERE status = 'ready' AND attempts > 0) AS retrying,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now()) AS lease_expired
FROM pgjobs_job
WHERE status IN ('ready', 'running')
GROUP BY queue
ORDER BY queue;

-- name: running_jobs_by_queue
-- Running jobs per queue and those whose lease expired (pgjobs_job_lease_idx: running rows only,
-- as many as the workers hold).
SELECT queue, count(*) AS running,
       count(*) FILTER (WHERE lease_expires_at < now()) AS lease_expired
FROM pgjobs_job
WHERE status = 'running'
GROUP BY queue;

-- name: retrying_jobs_in_queue
-- Retrying jobs of one queue, counted up to `cap` (pgjobs_job_retrying_idx).
SELECT count(*) AS retrying
FROM (SELECT 1 FROM pgjobs_job
      WHERE status = 'ready' AND attempts > 0 AND queue = %(queue)s
      LIMIT %(cap)s) AS capped;

-- name: due_jobs_in_queue
-- Due jobs of one queue. The dashboard only asks the planner how many rows this would return
-- (EXPLAIN), when pgjobs_job is too big to count.
SELECT 1 FROM pgjobs_job
WHERE queue = %(queue)s AND status = 'ready' AND attempts = 0 AND run_after <= now();

-- name: scheduled_jobs_in_queue
-- Scheduled jobs of one queue; estimated like due_jobs_in_queue.
SELECT 1 FROM pgjobs_job
WHERE queue = %(queue)s AND status = 'ready' AND attempts = 0 AND run_after > now();

-- name: queue_heads
-- For each queue, when its oldest due job became due: how late the queue is. Claims go by
-- priority first, so a low-priority job can starve behind newer high-priority ones; the job a
-- worker would claim next is not the oldest. pgjobs_job_claim_idx leads with priority: a loose
-- scan finds the distinct priorities of ready jobs (a handful), and within each the index is in
-- due order, so the oldest due job of a queue at that priority is the first of that queue.
-- Jobs waiting on a flow key are left out: they wait on their key's limits, not on workers.
WITH RECURSIVE priorities(priority) AS (
    (SELECT priority FROM pgjobs_job WHERE status = 'ready' AND flow_key IS NULL
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM pgjobs_job AS j
            WHERE j.status = 'ready' AND j.flow_key IS NULL AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities AS p WHERE p.priority IS NOT NULL
)
SELECT q.name AS queue, min(head.run_after) AS head_due, now() AS measured_at
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN priorities AS p
CROSS JOIN LATERAL (
    SELECT run_after FROM pgjobs_job
    WHERE status = 'ready' AND flow_key IS NULL AND queue = q.name AND priority = p.priority
      AND run_after <= now()
    ORDER BY priority DESC, run_after, id
    LIMIT 1
) AS head
WHERE p.priority IS NOT NULL
GROUP BY q.name;

-- name: queues_with_due_flow_jobs
-- Of the queues `queues` (those no live worker serves: health.py asks for no others, so this
-- walk is paid only when something is wrong), those with a due job waiting on a flow key:
-- queue_heads leaves such jobs out (late on their key's limits, not for want of a worker), but a
-- queue of them with no worker at all is a queue no one serves.
SELECT q.name AS queue
FROM unnest(%(queues)s::text[]) AS q(name)
WHERE EXISTS (SELECT 1 FROM pgjobs_job AS j
              WHERE j.queue = q.name AND j.status = 'ready' AND j.flow_key IS NOT NULL
                AND j.run_after <= now());

-- name: dead_letters_by_queue
-- Dead letters of each queue of `queues`: counted up to `cap`, and those of the last hour
-- exactly. Both walk pgjobs_dl_queue_idx (queue, failed_at): the first stops after `cap` entries,
-- the second reads the last hour only, so the cost does not grow with the dead-letter history.
SELECT q.name AS queue,
       (SELECT count(*) FROM (SELECT 1 FROM pgjobs_deadletter AS d
                              WHERE d.queue = q.name LIMIT %(cap)s) AS capped) AS dead_letters,
       (SELECT count(*) FROM pgjobs_deadletter AS d
        WHERE d.queue = q.name AND d.failed_at > now() - interval '1 hour') AS dead_letters_last_hour
FROM unnest(%(queues)s::text[]) AS q(name);

-- name: dead_letter_groups
-- Dead letters of the last 7 days grouped by error type and job name, with 1 h / 24 h / 7 d
-- counts, the latest failure and its reason; at most `limit` groups, biggest first.
WITH groups AS (
    SELECT error_type, name,
           count(*) FILTER (WHERE failed_at > now() - interval '1 hour') AS last_hour,
           count(*) FILTER (WHERE failed_at > now() - interval '24 hours') AS last_day,
           count(*) AS last_week,
           max(failed_at) AS latest
    FROM pgjobs_deadletter
    WHERE failed_at > now() - interval '7 days'
    GROUP BY error_type, name
    ORDER BY last_week DESC, error_type, name
    LIMIT %(limit)s
)
SELECT groups.*, sample.reason
FROM groups
CROSS JOIN LATERAL (
    SELECT reason FROM pgjobs_deadletter AS d
    WHERE d.error_type = groups.error_type AND d.name = groups.name
    ORDER BY d.failed_at DESC
    LIMIT 1
) AS sample;

-- name: job_queue_names
-- Distinct queues of pgjobs_job, dead letters, paused queues and recent statistics. The two
-- big tables are read with a loose index scan (one index probe per distinct queue), so the cost
-- follows the number of queues, not of rows. pgjobs_job_queue_idx leaves running rows out (the
-- claim writes no entry in it): their queues come from the lease index, as many rows as the
-- workers hold.
WITH RECURSIVE job_queues(queue) AS (
    (SELECT queue FROM pgjobs_job WHERE status <> 'running' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgjobs_job AS j
            WHERE j.queue > job_queues.queue AND j.status <> 'running'
            ORDER BY j.queue LIMIT 1)
    FROM job_queues WHERE job_queues.queue IS NOT NULL
),
dead_queues(queue) AS (
    (SELECT queue FROM pgjobs_deadletter ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM pgjobs_deadletter AS d WHERE d.queue > dead_queues.queue
            ORDER BY d.queue LIMIT 1)
    FROM dead_queues WHERE dead_queues.queue IS NOT NULL
)
SELECT queue AS name FROM job_queues WHERE queue IS NOT NULL
UNION SELECT queue FROM pgjobs_job WHERE status = 'running'
UNION SELECT queue FROM dead_queues WHERE queue IS NOT NULL
UNION SELECT name FROM pgjobs_queue
UNION SELECT queue FROM pgjobs_stat WHERE minute > now() - interval '1 hour'
ORDER BY name;

-- name: dead_letter_names
-- Distinct job names among dead letters (loose scan of pgjobs_dl_name_idx).
WITH RECURSIVE names(name) AS (
    (SELECT name FROM pgjobs_deadletter ORDER BY name LIMIT 1)
    UNION ALL
    SELECT (SELECT d.name FROM pgjobs_deadletter AS d WHERE d.name > names.name
            ORDER BY d.name LIMIT 1)
    FROM names WHERE names.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL;

-- name: dead_letter_error_types
-- Distinct error types among dead letters (loose scan of pgjobs_dl_type_idx).
WITH RECURSIVE types(error_type) AS (
    (SELECT error_type FROM pgjobs_deadletter ORDER BY error_type LIMIT 1)
    UNION ALL
    SELECT (SELECT d.error_type FROM pgjobs_deadletter AS d
            WHERE d.error_type > types.error_type ORDER BY d.error_type LIMIT 1)
    FROM types WHERE types.error_type IS NOT NULL
)
SELECT error_type AS name FROM types WHERE error_type IS NOT NULL;

-- name: table_row_estimates
-- The planner's row estimates of the two big tables (free; refreshed by autovacuum/ANALYZE).
SELECT relname AS name, GREATEST(reltuples, 0)::bigint AS rows
FROM pg_class
WHERE relname IN ('pgjobs_job', 'pgjobs_deadletter') AND relkind = 'r';

-- name: schedules_due
-- The scheduler's look (django_pgjobs/schedules.py): the active schedules due at `now` (the
-- database clock when NULL; a test's clock otherwise), oldest first, and on every row the clock
-- and the next fire time of the others (when to look again). One row with NULL schedule columns
-- when none is due. Only the schedules of `job_names` (the jobs this worker knows): one naming
-- a job it does not know (pgjobs.W002) is another release's to fire, and never fills the look;
-- so is one declared in code whose job here declares no cron= (`cron_jobs`: those that do;
-- pgjobs.W003: the decorator lost its cron=).
-- Served by pgjobs_schedule_due_idx.
WITH clock AS (SELECT COALESCE(%(now)s::timestamptz, now()) AS db_now)
SELECT clock.db_now,
       (SELECT min(next_fire_at) FROM pgjobs_schedule
        WHERE NOT paused AND next_fire_at > clock.db_now) AS next_wake,
       s.id, s.name, s.job_name, s.cron, s.time_zone, s.args, s.kwargs, s.catch_up,
       s.next_fire_at, s.changed_at, s.source
FROM clock
LEFT JOIN pgjobs_schedule AS s
       ON NOT s.paused AND (s.next_fire_at IS NULL OR s.next_fire_at <= clock.db_now)
      AND s.job_name = ANY(%(job_names)s::text[])
      AND (s.source <> 'code' OR s.job_name = ANY(%(cron_jobs)s::text[]))
ORDER BY s.next_fire_at NULLS FIRST, s.id
LIMIT %(limit)s;

-- name: fire_schedule
-- Enqueue the job of one fire time of a schedule, in one statement: the fire row (unique per
-- schedule and fire time) and the job are inserted together, so of several workers firing the
-- same time one inserts both and the others nothing (ON CONFLICT DO NOTHING waits for the first
-- to commit, then skips), and no crash between them can lose or double one. A scheduled fire
-- (`manual` false) also needs the schedule active, unchanged since the worker read it
-- (`changed_at`), and not past that time already (`next_fire_at`, only moved forward here), so
-- a slow worker never fires a time again after its fire row was pruned. Run now (`manual`)
-- needs none of that. The schedule row is locked first: an operator's edit being committed
-- is waited for and its new row checked (changed: not fired), so the fire never sets the old
-- definition's next fire time over the new one's. A job with a unique key (`unique_key`, its
-- @job(unique_key=...) of the schedule's arguments) is not enqueued while a job holding that key
-- is ready or running: the fire row is kept with no job (`job_id` NULL: skipped) and the next
-- fire time still moves on. The job is written as enqueue() writes it: its version (the
-- worker upgrades older arguments by it), its flow key and the key's row (flow_key_told: a
-- recurring job's limits hold as an enqueued one's). Returns the job's id (NULL: skipped); no
-- row: not fired.
WITH schedule AS (
    SELECT id FROM pgjobs_schedule
    WHERE id = %(schedule_id)s
      AND (%(manual)s OR (NOT paused AND changed_at = %(changed_at)s
                          AND next_fire_at <= %(fire_time)s))
    FOR NO KEY UPDATE
),
fire AS (
    INSERT INTO pgjobs_schedule_fire (schedule_id, fire_time, job_id, manual, fired_at)
    SELECT id, %(fire_time)s,
           CASE WHEN NOT EXISTS (SELECT 1 FROM pgjobs_job
                                 WHERE unique_key = %(unique_key)s
                                   AND status IN ('ready', 'running'))
                THEN nextval(pg_get_serial_sequence('pgjobs_job', 'id')) END,
           %(manual)s, now()
    FROM schedule
    ON CONFLICT (schedule_id, fire_time) DO NOTHING
    RETURNING schedule_id, job_id
),
inserted AS (
    INSERT INTO pgjobs_job (id, name, queue, priority, args, kwargs, status, run_after, attempts,
                            max_attempts, created_at, worker, errors, keep_result, unique_key,
                            task_backend, version, flow_key)
    SELECT fire.job_id, %(name)s, %(queue)s, %(priority)s, %(args)s::jsonb, %(kwargs)s::jsonb,
           'ready', now(), 0, %(max_attempts)s, now(), '', '[]'::jsonb, %(keep_result)s::boolean,
           %(unique_key)s, %(task_backend)s, %(version)s::int, %(flow_key)s
    FROM fire
    WHERE fire.job_id IS NOT NULL
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
    DO NOTHING
    RETURNING id, queue, run_after
),
{{flow_key_told}},
marked AS (
    UPDATE pgjobs_schedule AS s
    SET last_fire_at = %(fire_time)s,
        last_job_id = COALESCE((SELECT id FROM inserted), s.last_job_id),
        next_fire_at = CASE WHEN %(manual)s THEN s.next_fire_at
                            ELSE GREATEST(s.next_fire_at, %(next_fire)s::timestamptz) END
    FROM fire
    WHERE s.id = %(schedule_id)s
    RETURNING s.id
)
SELECT inserted.id AS job_id,
       CASE WHEN %(notify)s AND inserted.id IS NOT NULL
            THEN pg_notify('pgjobs', CASE WHEN %(flow_key)s::text IS NULL THEN inserted.queue
                                          ELSE 'flow:' || inserted.queue END) END
           IS NULL AS _notified
FROM fire LEFT JOIN inserted ON true, (SELECT count(*) FROM marked) AS m;

-- name: advance_schedule
-- Move a schedule's next fire time without firing (its first one; missed times skipped), if
-- no other worker or operator changed it since it was read.
UPDATE pgjobs_schedule
SET next_fire_at = %(next_fire)s
WHERE id = %(schedule_id)s AND changed_at = %(changed_at)s
  AND next_fire_at IS NOT DISTINCT FROM %(expected)s::timestamptz;

-- name: sync_schedule
-- Write a schedule declared in code (@job(cron=...)) as its row: inserted, or updated when its
-- definition changed (its pause kept; its next fire time kept unless its cron or time zone
-- changed: a time missed while the workers were down for the deploy that changed its arguments
-- keeps its misfire policy). A schedule of that name added in the admin is left alone.
-- Returns 'inserted' or 'updated'; no row: nothing to do.
INSERT INTO pgjobs_schedule (name, job_name, cron, time_zone, args, kwargs, catch_up, paused,
                             source, next_fire_at, changed_at)
VALUES (%(name)s, %(name)s, %(cron)s, %(time_zone)s, %(args)s::jsonb, %(kwargs)s::jsonb,
        %(catch_up)s, false, 'code', %(next_fire)s, now())
ON CONFLICT (name) DO UPDATE
SET job_name = EXCLUDED.job_name, cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, catch_up = EXCLUDED.catch_up,
    next_fire_at = CASE WHEN (pgjobs_schedule.cron, pgjobs_schedule.time_zone)
                             = (EXCLUDED.cron, EXCLUDED.time_zone)
                        THEN pgjobs_schedule.next_fire_at ELSE EXCLUDED.next_fire_at END,
    changed_at = now()
WHERE pgjobs_schedule.source = 'code'
  AND (pgjobs_schedule.job_name, pgjobs_schedule.cron, pgjobs_schedule.time_zone,
       pgjobs_schedule.args, pgjobs_schedule.kwargs, pgjobs_schedule.catch_up)
      IS DISTINCT FROM
      (EXCLUDED.job_name, EXCLUDED.cron, EXCLUDED.time_zone, EXCLUDED.args, EXCLUDED.kwargs,
       EXCLUDED.catch_up)
RETURNING CASE WHEN xmax = 0 THEN 'inserted' ELSE 'updated' END AS what;

-- name: schedules_shadowed
-- Of the schedules declared in code (`job_names`), those whose name a schedule added in the admin
-- holds: sync_schedule leaves it alone, so the declaration fires nothing (said at worker start).
SELECT name FROM pgjobs_schedule
WHERE name = ANY(%(job_names)s::text[]) AND source <> 'code'
ORDER BY name;

-- name: prune_schedule_fires
-- Delete fire rows older than `keep_seconds` (at most `limit`): a scheduled fire needs the
-- schedule's next fire time at or before it, so an old time cannot fire again without its row.
DELETE FROM pgjobs_schedule_fire
WHERE id IN (SELECT id FROM pgjobs_schedule_fire
             WHERE fired_at < now() - make_interval(secs => %(keep_seconds)s)
             LIMIT %(limit)s);

-- The transactional outbox (django_pgjobs/outbox/, docs/howto/outbox.md).

-- name: outbox_publish
-- Insert one event without a key (no order asked); returns its id.
INSERT INTO pgjobs_outbox_event (topic, key, payload, headers, created_at, available_at,
                                 attempts, last_error)
VALUES (%(topic)s, NULL, %(payload)s::jsonb, %(headers)s::jsonb, now(), now(), 0, '')
RETURNING id, created_at;

-- name: outbox_publish_keyed
-- Insert one event of a key. The upsert locks the key's row until the caller's transaction
-- ends, and the event's id is drawn only once that lock is held: a second transaction
-- publishing on the key waits for the first to end, so the key's ids are in commit order (the
-- relay publishes a key's events in id order). Other keys are not held back.
WITH locked AS (
    INSERT INTO pgjobs_outbox_key (key) VALUES (%(key)s)
    ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
    RETURNING key
)
INSERT INTO pgjobs_outbox_event (topic, key, payload, headers, created_at, available_at,
                                 attempts, last_error)
SELECT %(topic)s, locked.key, %(payload)s::jsonb, %(headers)s::jsonb, now(), now(), 0, ''
FROM locked
RETURNING id, created_at;

-- name: outbox_claim
-- Claim events for one relay in one statement: up to `limit` heads of keys and up to `limit`
-- events without a key. A key's head is the oldest event left of it (the key rows say which
-- keys have events: the work is per key waiting, never per event waiting); only heads are
-- claimed, so one key never has two events in flight and its events go out in id order, which
-- is commit order (outbox_publish_keyed). SKIP LOCKED: relays never wait on each other; a head
-- another relay holds (its lease running) is skipped, and as the key's next event is no head,
-- the key waits while the other keys go on. A head deleted (published) since this statement's
-- snapshot cannot be locked and is skipped; its successor is claimed at the next look.
WITH keyed AS (
    SELECT e.id
    FROM pgjobs_outbox_key k
    JOIN pgjobs_outbox_event e
      -- "ORDER BY key, id": the order of the (key, id) index, which finds a key's head at once
      ON e.id = (SELECT h.id FROM pgjobs_outbox_event h WHERE h.key = k.key
                 ORDER BY h.key, h.id LIMIT 1)
    WHERE e.available_at <= now()
      AND (e.claimed_until IS NULL OR e.claimed_until < now())
    ORDER BY e.id
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
), loose AS (
    SELECT e.id FROM pgjobs_outbox_event e
    WHERE e.key IS NULL
      AND e.available_at <= now()
      AND (e.claimed_until IS NULL OR e.claimed_until < now())
    ORDER BY e.id
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
)
UPDATE pgjobs_outbox_event e
SET claimed_until = now() + make_interval(secs => %(lease)s), claim_token = %(token)s::uuid
FROM (SELECT id FROM keyed UNION ALL SELECT id FROM loose) claimed
WHERE e.id = claimed.id
RETURNING e.id, e.topic, e.key, e.payload::text AS body, e.headers::text AS header_text,
          e.created_at, e.attempts;

-- name: outbox_published
-- Delete the events the broker confirmed; fenced by the claim token (a relay whose lease ran
-- out deletes nothing another relay now holds).
DELETE FROM pgjobs_outbox_event
WHERE id = ANY(%(ids)s::bigint[]) AND claim_token = %(token)s::uuid;

-- name: outbox_retry
-- Give claimed events back to be tried after `delay` seconds (the broker was unreachable);
-- fenced.
UPDATE pgjobs_outbox_event
SET claimed_until = NULL, claim_token = NULL, attempts = attempts + 1, last_error = %(error)s,
    available_at = now() + make_interval(secs => %(delay)s)
WHERE id = ANY(%(ids)s::bigint[]) AND claim_token = %(token)s::uuid;

-- name: outbox_dead_letter
-- Move an event the broker refused to pgjobs_outbox_deadletter in one statement; fenced.
WITH moved AS (
    DELETE FROM pgjobs_outbox_event
    WHERE id = %(id)s AND claim_token = %(token)s::uuid
    RETURNING *
)
INSERT INTO pgjobs_outbox_deadletter (id, topic, key, payload, headers, created_at, attempts,
                                      error, failed_at)
SELECT id, topic, key, payload, headers, created_at, attempts, %(error)s, now() FROM moved;

-- name: outbox_prune_keys
-- Delete the key rows no event uses any more (a publisher holding one is skipped). Run in a
-- REPEATABLE READ transaction: a key row a publisher changed after this statement's snapshot
-- (its event committed unseen) fails the statement instead of being deleted under the event.
DELETE FROM pgjobs_outbox_key
WHERE key IN (
    SELECT k.key FROM pgjobs_outbox_key k
    WHERE NOT EXISTS (SELECT 1 FROM pgjobs_outbox_event e WHERE e.key = k.key)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- name: outbox_backlog
-- The events not yet published (counted up to `cap`) and the age of the oldest (by id: ids
-- follow commit order closely enough for an age in seconds, and the primary key serves it).
SELECT (SELECT count(*) FROM (SELECT 1 FROM pgjobs_outbox_event LIMIT %(cap)s) capped) AS events,
       (SELECT EXTRACT(epoch FROM now() - created_at)::float8
        FROM pgjobs_outbox_event ORDER BY id LIMIT 1) AS oldest_seconds,
       (SELECT count(*) FROM (SELECT 1 FROM pgjobs_outbox_deadletter LIMIT %(cap)s) capped)
           AS dead_lettered;

-- name: outbox_consume_once
-- Record that `consumer` handled event `event_id`, in the handler's transaction; no row comes
-- back when it already had (a redelivery).
INSERT INTO pgjobs_processed_event (consumer, event_id, processed_at)
VALUES (%(consumer)s, %(event_id)s, now())
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING id;
