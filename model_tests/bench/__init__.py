"""Benchmarks of the managers and the kernels: ``pagedkv bench`` (``make bench``).

``workload`` generates a seeded serving workload (``requests``) and runs it once through a
vLLM-style scheduler loop (``scheduler``), recording every manager call: the *operation stream*
that every implementation then replays (``replay``), call for call. ``sections`` measure it
(per-operation µs, end to end against the optimized manager, interleaved; growth with the pool
against a plain-Python ``control`` loop; ``kernels`` in a child process, since only they need
torch) and ``runner`` prints them, writes JSON and a plot. ``baseline`` exports an earlier
commit's optimized manager so that it can be measured beside today's in one process.

Benchmarks print; they never assert a time.
"""
