"""DeepSeek-V4 hyper-connection tensors against the rotation QuaRot applied.

msModelSlim's QuaRot (DeepSeek-V4 adapter ``get_rotate_map``) right-rotates the residual stream's
readers — ``embed``, ``head``, ``hc_head_fn``, every layer's ``hc_attn_fn`` / ``hc_ffn_fn``, the MTP
block's ``e_proj`` / ``h_proj`` / ``head`` / ``emb`` and its layer's ``hc_*_fn`` — with one ``D x D``
matrix ``R`` that the saver writes as ``optional/quarot.safetensors`` (``global_rotation``, named in the
description's ``optional.quarot.rotation_map``). The ``hc_*_fn`` act on the ``hc_mult`` streams flattened
(``[mix, hc * D]``), so rotated they are ``fn @ blockdiag(R, ..., R)``. Its map lists no ``mtp.N.hc_head_fn``:
that tensor stays as it was while the MTP block's streams are rotated.

:func:`check` compares each ``*hc_*_fn`` of the checkpoint with the reference float model's (the model the
checkpoint was exported from, before QuaRot), rotated and not: the orientation (``W R`` or ``W R^T``) is
read from ``embed``. A tensor that matches the unrotated reference and not the rotated one is an error
finding ``hc-unrotated``, with the error of its mixes on the rotated stream (random Gaussian streams, the
mixes the serving model computes against the ones the float model computes). Without a reference, only
the stored dtypes are compared: an ``hc_*`` tensor whose dtype differs from the others' is a warning
``hc-dtype``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .issues import Findings

HC = re.compile(r"(^|\.)hc_(attn|ffn|head)_(fn|base|scale)$")
TOLERANCE = 0.01      # relative Frobenius distance under which two float tensors "match" (bf16 storage: ~0.3 %)


def _rotation(res) -> np.ndarray | None:
    opt = (res.checkpoint.description.globals.get("optional") or {}).get("quarot") or {}
    rel = (opt.get("rotation_map") or {}).get("global_rotation")
    if not rel:
        return None
    path = Path(res.checkpoint.path) / rel
    if not path.is_file():
        return None
    from safetensors.numpy import load_file

    return np.asarray(load_file(str(path))["global_rotation"], dtype=np.float64)


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32).astype(np.float64)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    n = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b) / n) if n else float(np.linalg.norm(a))


def dtype_findings(res) -> Findings:
    found = Findings()
    ck = res.checkpoint
    names = [n for n in ck.entries if HC.search(n)]
    dtypes = {n: str(ck.entries[n].dtype) for n in names}
    if not dtypes:
        return found
    common = max(set(dtypes.values()), key=list(dtypes.values()).count)
    for n, d in sorted(dtypes.items()):
        if d != common:
            found.warning(n, f"stored {d} while the other hyper-connection tensors are {common} (the reference "
                             "computes every hc_* in fp32)", "hc-dtype")
    return found


def check(res, reference: dict, *, seed: int = 0) -> tuple[Findings, list[dict]]:
    """Findings and one row per ``hc_*_fn`` (module docstring). ``reference``: float arrays by native name."""
    found = dtype_findings(res)
    rows: list[dict] = []
    r = _rotation(res)
    if r is None:
        return found, rows
    ck = res.checkpoint
    if "embed.weight" not in reference or "embed.weight" not in ck.entries:
        return found, rows
    e_ck, e_ref = _f64(ck.tensor("embed.weight")), _f64(reference["embed.weight"])
    right = r if _rel(e_ref @ r, e_ck) <= _rel(e_ref @ r.T, e_ck) else r.T
    d = right.shape[0]
    rng = np.random.default_rng(seed)
    for n in sorted(x for x in ck.entries if x.endswith("_fn") and HC.search(x)):
        if n not in reference:
            continue
        fn_ck, fn_ref = _f64(ck.tensor(n)), _f64(reference[n])
        hc = fn_ck.shape[1] // d
        if fn_ck.shape != fn_ref.shape or hc * d != fn_ck.shape[1]:
            continue
        block = np.kron(np.eye(hc), right)
        rot = fn_ref @ block
        to_rot, to_plain = _rel(fn_ck, rot), _rel(fn_ck, fn_ref)
        x = rng.standard_normal((64, hc * d))
        mixes_err = _rel((x @ block) @ fn_ck.T, x @ fn_ref.T)       # the rotated stream read by the stored fn
        status = "rotated" if to_rot <= TOLERANCE else "unrotated" if to_plain <= TOLERANCE else "neither"
        rows.append({"tensor": n, "vs_rotated": to_rot, "vs_unrotated": to_plain, "mixes_error": mixes_err,
                     "status": status})
        if status == "unrotated":
            found.error(n, f"not rotated by QuaRot (matches the float model's tensor to {to_plain:.2%}, the rotated one "
                           f"to {to_rot:.0%}) although the stream it reads is: its mixes are {mixes_err:.0%} off on the "
                           "rotated stream (msModelSlim's DeepSeek-V4 rotate map lists hc_head_fn only globally)",
                        "hc-unrotated")
        elif status == "neither":
            found.warning(n, f"matches neither the float model's tensor ({to_plain:.1%}) nor it rotated by the saved "
                             f"QuaRot rotation ({to_rot:.1%})", "hc-rotation")
    return found, rows
