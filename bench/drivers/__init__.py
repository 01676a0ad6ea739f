"""One module per queue under test, each a small command line run in its own process.

Every driver answers the same commands (``python -m bench.drivers.<name> <command>``):

``setup``            create the system's tables in ``BENCH_DATABASE_URL``
``enqueue N``        enqueue N no-op jobs, one per transaction; waits for a line on stdin first,
                     prints ``{"start": t0, "end": t1}`` (wall clock)
``bulk N``           enqueue N no-op jobs with the system's bulk API; prints ``{"seconds": s,
                     "end": t}``; with ``BENCH_HOLD=1`` it then waits for a line on stdin
                     before exiting (the drain is timed without the producer's exit)
``bulk-sleep N``     the same with jobs that sleep 2-5 ms
``latency N GAP``    enqueue N timing jobs GAP seconds apart (their handler writes the delay from
                     enqueue to start to ``BENCH_LATENCY_FILE``)
``soak RATE S GAP``  (django-pgjobs) RATE no-op jobs/s for S seconds in batches every 10 ms,
                     and a probe job every GAP seconds (``bench/soak.py``)
``worker OPTIONS``   run one worker process until SIGTERM (``--concurrency``, ``--batch``,
                     ``--poll`` for poll-only)
"""
