"""FRACTAL_NZ storage in torch: :func:`w8a8.format_cast_nz` / :func:`w8a8.nz_to_nd`.

Pure data movement (pad, reshape, permute), so the tensors travel as raw integers of the element's
width (:mod:`backends.torch_cpu` views any 1/2/4/8-byte dtype that way): bit-exact for every dtype.
``c0`` (columns per fractal) comes from the *original* dtype's itemsize.
"""

from __future__ import annotations

import math

import torch

_ROWS = 16


def format_cast_nz(w: torch.Tensor, *, c0: int) -> torch.Tensor:
    """ND ``[..., R, C]`` -> NZ ``[..., ceil(C/c0), ceil(R/16), 16, c0]``, zero padded."""
    r, c = w.shape[-2:]
    r1, c1 = math.ceil(r / _ROWS), math.ceil(c / c0)
    lead = tuple(w.shape[:-2])
    padded = torch.nn.functional.pad(w, (0, c1 * c0 - c, 0, r1 * _ROWS - r)) if w.numel() else \
        torch.zeros(lead + (r1 * _ROWS, c1 * c0), dtype=w.dtype)
    blocks = padded.reshape(lead + (r1, _ROWS, c1, c0))
    n = len(lead)
    return blocks.permute(*range(n), n + 2, n, n + 1, n + 3).contiguous()


def nz_to_nd(w_nz: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """NZ storage -> ND of the logical ``shape`` (the storage shape was checked against it)."""
    c1, r1, _, c0 = w_nz.shape[-4:]
    lead = tuple(w_nz.shape[:-4])
    n = len(lead)
    nd = w_nz.permute(*range(n), n + 1, n + 2, n, n + 3).reshape(lead + (r1 * _ROWS, c1 * c0))
    return nd[..., : shape[-2], : shape[-1]].contiguous()
