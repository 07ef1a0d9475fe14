"""The peer frameworks, each running :mod:`benchmarks.workload` through its own agent loop.

Every module here exposes ``NAME``, ``version() -> str`` and ``async def run(n, stamps)``; it
imports its framework lazily so the suite runs (and says which peers are missing) without the
``bench`` extra.
"""
