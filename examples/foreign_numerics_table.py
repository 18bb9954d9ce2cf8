"""The README's table of how each foreign backend's numerics differ from the Ascend record, per op.

Generated, not typed: for every backend given, every op it implements and every field where its declared
record departs from :data:`w8a8.ASCEND`, the golden is run on the conformance strategy's drawn cases of that
op under the declared record and under the record with that one field put back to its Ascend value; the
field is listed for the op when it changes the result of at least one case (with the count). Fields that
change nothing on any drawn case of an op are not listed for it (the op does not read them, or the drawn
data never reaches the difference).

    python examples/foreign_numerics_table.py --backend onnxruntime --backend onnxruntime-dqmm \\
        --backend torchao --cases 40 > table.md
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import backends
import w8a8
from backends.numpy_backend import NumpyBackend
from conformance.evaluate import build_inputs
from conformance.registry import specs
from conformance.runner import draw_cases


def _outcome(golden, op, args, kwargs):
    try:
        with np.errstate(all="ignore"):
            out = golden.call(op, *args, **kwargs)
    except (ValueError, TypeError, OverflowError) as exc:
        return ("raise", type(exc).__name__)
    parts = out if isinstance(out, tuple) else (out,)
    return tuple(None if p is None else (np.asarray(p).dtype.str, np.ascontiguousarray(p).tobytes()) for p in parts)


def rows(name: str, cases: int, seed: int) -> list[tuple[str, str, str]]:
    """``[(op, field differences that change it, capability summary)]`` of one backend."""
    b = backends.get(name)
    record = b.numerics
    diffs = w8a8.ASCEND.differences(record)
    caps = b.info()["capabilities"]
    out = []
    for op in b.ops():
        spec = specs()[op]
        accepted = []
        for params in draw_cases(spec, cases, seed):
            args, kwargs = build_inputs(spec, params)
            try:
                a = b.checked_args(w8a8.registry.get(op), args, dict(kwargs), record)
            except (ValueError, TypeError):
                continue
            if not b.declines(op, a):
                accepted.append((args, kwargs))
        full = NumpyBackend(record)
        changed = []
        for field, (ascend, mine) in diffs.items():
            back = NumpyBackend(dataclasses.replace(record, **{field: ascend}))
            n = sum(_outcome(full, op, a, k) != _outcome(back, op, a, k) for a, k in accepted)
            if n:
                changed.append(f"`{field}`: {ascend} → **{mine}** ({n}/{len(accepted)})")
        out.append((op, "<br>".join(changed) or "none (bit-identical to Ascend on these cases)",
                    "; ".join(caps.get(op, [])) or "what the golden accepts"))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", required=True)
    parser.add_argument("--cases", type=int, default=40, help="drawn cases per op (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.backend:
        b = backends.get(name)
        print(f"**`{name}`** — record `{b.numerics.name}`; {b.info().get('library', '')}\n")
        print("| op | fields that change its result vs Ascend (drawn cases changed / accepted) | what the kernel takes |")
        print("|---|---|---|")
        for op, changed, caps in rows(name, args.cases, args.seed):
            print(f"| `{op}` | {changed} | {caps.replace('|', chr(92) + '|')} |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
