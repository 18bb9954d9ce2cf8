"""The roofline of a benchmark case: the bytes that must move, the operations that must run, and which
of the machine's ceilings (:class:`bench.peak.Peaks`) limits them.

For a case the model counts

* ``ops``: the case's useful work (``BenchCase.work``; GEMM cases count ``2 M K N``), run on the
  backend's compute unit (the int8 ceiling for int8 kernels, fp32 / fp64 FMA for the golden);
* ``bytes``: what the op cannot avoid reading and writing once — every weight the op touches (int8), the
  activation in and the result out in their dtypes, the per-channel / per-token scales. A MoE layer
  touches only the experts that got a token: with random top-k routing of ``T`` tokens over ``E``
  experts that is ``E (1 - (1 - k/E)^T)`` experts in expectation.

The time each resource needs is ``ops / ceiling`` and ``bytes / bandwidth``, with the bandwidth of the
memory level the data lives in while the case is timed (the bench calls an op over and over on the
same operands): the L2s when ``bytes`` fits in half of them, the last-level cache when it fits in three
quarters of it (measured here: a 24 MiB working set still reads at 166 GB/s from the 32 MiB L3, against
200 GB/s at 16 MiB and 34 GB/s from memory), memory (``bw_dram``) otherwise. The limiting resource is the one that needs longer; "% of
roofline" is that time over the time taken (100 % = the case runs as fast as its limiting resource
allows). Next to it ``dram_pct`` is the same for the bandwidth of memory alone, the serving view of a
decode Linear whose weights fit in this CPU's cache in a bench loop but come from memory when the
model's other layers run in between ("weights read once").
"""

from __future__ import annotations

from dataclasses import dataclass

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "int32": 4}


@dataclass(frozen=True)
class Traffic:
    """What a case must move and run: bytes (all levels), ops, and the working set that decides the level."""

    bytes: float
    ops: float
    working_set: float


def _gemm(m, k, n, x_bytes, y_bytes, weights=1.0):
    return Traffic(bytes=weights * k * n + m * k * x_bytes + m * n * y_bytes + 8 * n + 4 * m,
                   ops=2.0 * m * k * n, working_set=weights * k * n + m * k * x_bytes + m * n * y_bytes)


def touched_experts(t: int, e: int, k: int) -> float:
    """Expected number of experts that get at least one of ``t`` tokens under random top-``k`` routing."""
    return e * (1.0 - (1.0 - k / e) ** t) if e else 0.0


def traffic(op: str, params: dict, work: float) -> Traffic | None:
    """The bytes and ops of a case (``BenchCase.op / params / work``), or None where no model is known."""
    p = params
    if op in ("w8a8_dynamic_linear", "w8a8_static_linear") and {"m", "k", "n"} <= p.keys():
        return _gemm(p["m"], p["k"], p["n"], 2, 2)
    if op == "quant_matmul" and {"m", "k", "n"} <= p.keys():
        return _gemm(p["m"], p["k"], p["n"], 1, 2)
    if op == "int_matmul" and {"m", "k", "n"} <= p.keys():
        return _gemm(p["m"], p["k"], p["n"], 1, 4)
    if op == "w8a8_moe" and {"t", "e", "topk", "h", "i"} <= p.keys():
        t, e, k, h, i = p["t"], p["e"], p["topk"], p["h"], p["i"]
        weights = touched_experts(t, e, k) * 3 * h * i + touched_experts(t, e, k) * (2 * i + h) * 2
        act = t * h * 2 * 2 + t * k * 8
        return Traffic(bytes=weights + act, ops=work, working_set=weights + act)
    if op == "grouped_matmul" and {"t", "e", "topk", "n"} <= p.keys():
        t, e, k, n = p["t"], p["e"], p["topk"], p["n"]
        h = work / (2.0 * t * k * n) if t and k and n else 0.0   # work = 2 T k H N
        weights = touched_experts(t, e, k) * h * n
        act = t * k * (h + 2 * n + 4)
        return Traffic(bytes=weights + act, ops=work, working_set=weights + act)
    if op == "dynamic_quant" and {"m", "h"} <= p.keys():
        b = p["m"] * p["h"] * 3 + 4 * p["m"]
        return Traffic(bytes=b, ops=0.0, working_set=b)
    return None


@dataclass(frozen=True)
class Roofline:
    limit: str          # "int8", "fp32 (2 x fp64 FMA)", "bandwidth (L2)", "bandwidth (LLC)", "bandwidth (DRAM)"
    pct: float          # time the limiting resource needs / time taken
    t_compute: float    # seconds
    t_bandwidth: float  # seconds, at the level the data lives in
    level: str
    bytes: float
    ops: float
    dram_pct: float     # (bytes / bw_dram) / time taken
    unit: str = ""      # the compute unit of the ceiling: "AVX-512 VNNI", "AMX-INT8" ("" unknown / not int8)

    def label(self) -> str:
        what = "bandwidth-bound" if self.limit.startswith("bandwidth") else f"{self.limit}-bound"
        where = f" ({self.level})" if self.limit.startswith("bandwidth") else (f" ({self.unit})" if self.unit else "")
        return f"{what}{where} at {100 * self.pct:.0f}%"

    def as_dict(self) -> dict:
        return dict(self.__dict__, label=self.label())


def level(peaks, working_set: float) -> tuple[str, float]:
    """The memory level a working set lives in between rounds, and its read bandwidth."""
    threads = max(1, peaks.threads)
    if peaks.l2_bytes and working_set <= peaks.l2_bytes * threads / 2 and peaks.bw_l2:
        return "L2", peaks.bw_l2
    if peaks.llc_bytes and working_set <= peaks.llc_bytes * 3 / 4 and peaks.bw_llc:
        return "LLC", peaks.bw_llc
    return "DRAM", peaks.bw_dram


def roofline(record: dict, peaks, compute_ceiling: float | None, compute_label: str, unit: str = "") -> Roofline | None:
    """The roofline of a timed record (``op``, ``params``, ``work``, ``stats``), or None without a model,
    a time, or the bandwidth ceilings. ``unit``: the compute unit whose ceiling ``compute_ceiling`` is (named
    in the label of a compute-bound case)."""
    st = record.get("stats") or {}
    t = st.get("median")
    tr = traffic(record.get("op", ""), record.get("params") or {}, record.get("work") or 0.0)
    if not t or tr is None or not getattr(peaks, "bw_dram", 0):
        return None
    lvl, bw = level(peaks, tr.working_set)
    t_bw = tr.bytes / bw if bw else 0.0
    t_c = tr.ops / compute_ceiling if compute_ceiling and tr.ops else 0.0
    limit = compute_label if t_c > t_bw else f"bandwidth ({lvl})"
    return Roofline(limit=limit, pct=max(t_c, t_bw) / t, t_compute=t_c, t_bandwidth=t_bw, level=lvl, bytes=tr.bytes,
                    ops=tr.ops, dram_pct=(tr.bytes / peaks.bw_dram) / t, unit=unit)
