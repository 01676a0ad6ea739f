"""Benchmarks of django-pgjobs against its peers: ``python -m bench`` (see docs/benchmarks.md)."""
