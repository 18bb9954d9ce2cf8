"""The expert-parallel MoE layer in R processes (torch-dist, gloo on loopback) at DeepSeek-V4-Flash shapes
(pytest-benchmark; no assertions on time). The same measurement as ``python -m bench.ep`` (its docstring
says what each number is):

* ``test_ep_layer[R-dispatch]``: ``w8a8_moe_ep`` through ``backend.prepare(...).run`` (the experts loaded in
  the rank processes once, untimed), R = 2 and 4, INT8 and BF16 dispatch; ``extra_info`` holds the wire
  bytes per token (dispatch payload + scale, all and to other ranks; the combine's return trip) and the
  slowest rank's seconds per phase (dispatch, experts, combine) of one run with a barrier around each
  phase. The output is checked bit-identical to the golden once per configuration.

H = 4096, I = 2048, top-6; E = 32 routed experts (DSV4: 256; ``W8A8_BENCH_EP_EXPERTS``) and 64 tokens per
rank (``W8A8_BENCH_EP_TOKENS``)::

    python -m pytest benchmarks/test_bench_torch_dist_ep.py --benchmark-only
"""

from __future__ import annotations

import os

import pytest

import backends
import w8a8
from bench.ep import PHASES, TOP_K, H, layer_inputs, wire_per_token

torch = pytest.importorskip("torch")

EXPERTS = int(os.environ.get("W8A8_BENCH_EP_EXPERTS", "32"))
TOKENS = int(os.environ.get("W8A8_BENCH_EP_TOKENS", "64"))
CONFIGS = [(r, d) for r in (2, 4) for d in ("int8", "bf16")]
_ROWS: list = []


@pytest.fixture(scope="module")
def td():
    backend = backends.get("torch-dist")
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"torch-dist is not available: {why}")
    yield backend
    backend.close()


@pytest.mark.parametrize("ranks, dispatch", CONFIGS, ids=[f"R{r}-{d}" for r, d in CONFIGS])
def test_ep_layer(benchmark, td, bench_report, ranks, dispatch):
    args, kwargs = layer_inputs(ranks, TOKENS, EXPERTS)
    kwargs["dispatch"] = dispatch
    prepared = td.prepare("w8a8_moe_ep", *args, **kwargs)
    got = prepared.finish(prepared.run())
    want = w8a8.w8a8_moe_ep(*args, **kwargs)
    assert all(w.dtype == g.dtype and w.tobytes() == g.tobytes() for w, g in zip(want, got))   # bit-identical
    benchmark.group = f"torch-dist-ep-E{EXPERTS}-T{TOKENS}"
    benchmark.pedantic(prepared.run, rounds=5, iterations=1, warmup_rounds=1)
    td.time_phases = True
    try:
        prepared.run()
    finally:
        td.time_phases = False
    phases = {p: max(r["seconds"][p] for r in td.last_phases) for p in PHASES}
    wire = wire_per_token(td.last_phases, ranks * TOKENS, H, TOP_K)
    benchmark.extra_info.update({f"{p}_ms": round(s * 1e3, 2) for p, s in phases.items()})
    benchmark.extra_info.update({f"wire_{k}_bytes_per_token": round(v, 1) for k, v in wire.items()})
    _ROWS.append((ranks, dispatch, phases, wire))
    if len(_ROWS) == 1:
        bench_report(_summary)


def _summary(rep) -> None:
    rep.write_sep("-", f"torch-dist EP layer: H={H}, I=2048, top-{TOP_K}, E={EXPERTS}, {TOKENS} tokens per rank")
    for ranks, dispatch, phases, wire in _ROWS:
        rep.write_line(f"R={ranks} {dispatch}: dispatch {wire['dispatch_all']:,.0f} B/token "
                       f"({wire['dispatch_remote']:,.0f} to other ranks), combine {wire['combine_all']:,.0f} B/token; "
                       + ", ".join(f"{p} {s * 1e3:.1f} ms" for p, s in phases.items()))
