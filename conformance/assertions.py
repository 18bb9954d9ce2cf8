"""``assert_close``: the conformance comparison for users' own kernel tests.

    from conformance import assert_close
    y = my_kernel(x, w, s)                       # the kernel under test
    ref = w8a8.w8a8_dynamic_linear(x, w, s)      # the golden
    assert_close(y, ref, op="w8a8_dynamic_linear", inputs=((x, w, s), {}))

The tolerance comes from a tolerance table (``conformance.tolerances``): the entry for
``(backend, op, output, dtype)``, falling back to ``backend="*"``; without an entry the comparison
is bitwise. On failure the AssertionError carries the same information as a conformance report:
mismatch counts, the worst ULP / code distance and where it is, and — when ``inputs`` are given —
the attribution: the :class:`w8a8.Numerics` change under which the golden reproduces the kernel's
output bit for bit, named in words (tie rounding, reciprocal vs divide, FP19 truncation, ...).
"""

from __future__ import annotations

import numpy as np

from w8a8 import dtypes as _dt

from .compare import FAIL, compare


def assert_close(actual, expected, *, op: str, output: str | None = None, dtype=None, backend: str = "*",
                 table=None, inputs: tuple | None = None, numerics=None):
    """Assert that ``actual`` (a kernel's output) agrees with ``expected`` (the golden's) for ``op``.

    Parameters
    ----------
    actual, expected : arrays of the same shape and dtype (one output of the op).
    op : the op name (``w8a8 conformance --list-ops``).
    output : which output of the op (default: its first, e.g. ``"y"``).
    dtype : the output dtype used for the table lookup (default: ``actual.dtype``).
    backend : the table entry to use (default ``"*"``: entries tuned for any backend).
    table : a :class:`~conformance.tolerances.ToleranceTable`, a path to a TOML table, or None for the
        packaged table.
    inputs : ``(args, kwargs)`` the op was called with: enables the tie-aware comparison of int codes
        and the attribution of a failure.
    numerics : the :class:`w8a8.Numerics` the kernel claims (default: the Ascend defaults).

    Returns the :class:`~conformance.compare.Comparison` when the outputs agree; raises
    ``AssertionError`` (with the report) when they do not.
    """
    from w8a8.numerics import ASCEND

    from .attribution import describe, reproduce
    from .registry import get
    from .tolerances import ToleranceTable

    spec = get(op)
    names = [o.name for o in spec.outputs]
    output = output or names[0]
    if output not in names:
        raise ValueError(f"assert_close: argument 'output' must be one of {names} for {op}; got {output!r}")
    kind = dict((o.name, o.kind) for o in spec.outputs)[output]
    actual, expected = np.asarray(actual), np.asarray(expected)
    if table is None:
        table = ToleranceTable.packaged()
    elif not isinstance(table, ToleranceTable):
        table = ToleranceTable.load(table)
    dname = _dt.name(dtype if dtype is not None else actual.dtype)
    tol = table.lookup(backend, op, output, dname)
    pre = None
    if inputs is not None and tol.tie_off_by_one and spec.pre_round:
        pre = spec.pre_round(inputs[0], inputs[1], numerics or ASCEND).get(output)
    comp = compare(output, kind, expected, actual, tolerance=tol, pre_round=pre)
    if comp.verdict != FAIL:
        return comp
    lines = [f"{op}.{output} ({dname}): {comp.note}",
             f"  tolerance: {tol} (table {table.source}, backend {backend!r})",
             "  " + "; ".join(part for part, value in (
                 (f"mismatches {comp.mismatches} of {comp.n}", True), (f"max ULP {comp.max_ulp}", comp.max_ulp),
                 (f"max code diff {comp.max_code_diff}", comp.max_code_diff),
                 (f"first at {comp.first_mismatch}", comp.first_mismatch), (f"max abs {comp.max_abs}", comp.max_abs),
                 (f"SQNR {comp.sqnr_db} dB", comp.sqnr_db)) if value is not None)]
    if inputs is not None:
        args, kwargs = inputs
        found, tried = reproduce(spec, tuple(args), dict(kwargs), {output: actual}, numerics or ASCEND)
        if found:
            lines.append(f"  likely cause: {describe(found[0])} — the golden reproduces this output bit for bit "
                         f"under that change ({tried} candidates tried)")
        else:
            lines.append(f"  no Numerics variant of the golden reproduces this output ({tried} tried)")
    raise AssertionError("\n".join(lines))
