"""Benchmark machinery: cases at real model shapes (:mod:`.cases`), device-correct timing
(:mod:`.timing`), one process per backend with verification (:mod:`.runner`), machine ceilings
(:mod:`.peak`), tables, JSON and plots (:mod:`.report`). ``w8a8 bench`` and the pytest-benchmark
suites in ``benchmarks/`` share the case definitions."""
