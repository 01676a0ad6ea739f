"""Bounds shared by validation, the models and the docs."""

PRIORITY_MIN = -100
PRIORITY_MAX = 100
QUEUE_NAME_MAX = 100
NAME_MAX = 255
UNIQUE_KEY_MAX = 255
ERROR_TYPE_MAX = 255
MAX_ATTEMPTS_MAX = 1000
TASK_BACKEND_MAX = 100
#: Longest duration accepted anywhere (leases, delays, retry caps, settings): 10 years. Larger
#: values would overflow PostgreSQL's timestamp arithmetic in the worker instead of failing early.
MAX_SECONDS = 10 * 365 * 24 * 3600
#: Longest concurrency_key or fairness_key; the stored key adds a prefix (FLOW_KEY_MAX).
FLOW_USER_KEY_MAX = 200
FLOW_KEY_MAX = 255
CONCURRENCY_LIMIT_MAX = 10_000
