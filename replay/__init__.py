"""replay — judge a real Ascend run from its msprobe dump, call by call, against the golden.

A sibling of :mod:`conformance` (docs/replay.md). Modules, in the order data flows:

* :mod:`.pt_reader` — ``.pt`` / ``.npy`` tensor files without torch and without unpickling;
* :mod:`.dump` — dump discovery, ``dump.json`` / ``stack.json`` / ``construct.json``, tensor records and
  the loader that turns them into arrays or says why not;
* :mod:`.mapping` — a dumped torch_npu call -> the golden call, argument by argument;
* :mod:`.golden` — the one place that calls the golden (``platform`` passes through here);
* :mod:`.engine` — the adapter to the conformance engine (registry, compare, attribution, results);
* :mod:`.stats`, :mod:`.msprobe_criteria` — statistics / CRC judgements, and msprobe's own criteria;
* :mod:`.weights` — weights the dump lacks, from the msModelSlim checkpoint;
* :mod:`.runner` — the walk over a dump: isolated and chained replay, verdicts, first divergence;
* :mod:`.case` — the single-op ``.npz`` repro; :mod:`.reports` — Markdown, JSON, JUnit, HTML.

The command line is ``w8a8 replay`` (:mod:`w8a8cli.replay_cmd`).
"""
