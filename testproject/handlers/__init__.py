"""The examples of docs/howto/handlers.md, as real job modules the tests run with ``runjobs``.

Each section of the how-to has its own module here; every ``python`` block of the page that
starts with ``# testproject/handlers/<module>.py`` must appear, line for line, in that module
(tests/test_docs_examples.py), so what the page shows is what the tests execute.
"""
