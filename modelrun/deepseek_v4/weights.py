"""The tensors of a DeepSeek-V4 model directory (``*.safetensors``, native names) as torch tensors.

Safe loading only (``safetensors``: no pickle). ``dtype`` casts every floating tensor (the float test's
fp32 model); None keeps each as stored (bf16 weights, fp32 ``hc_*`` / norms / ``ape`` as the saver wrote).
Integer tensors (``tid2eid``) stay integers.
"""

from __future__ import annotations

from pathlib import Path

import torch


def load_dir(path, dtype=None, *, skip_suffixes=()) -> dict[str, torch.Tensor]:
    from safetensors.torch import safe_open

    d = Path(path)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path}: no *.safetensors files")
    out = {}
    for f in files:
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                if k.endswith(skip_suffixes):
                    continue
                t = h.get_tensor(k)
                out[k] = t.to(dtype) if dtype is not None and t.is_floating_point() else t
    return out
