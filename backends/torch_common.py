"""NumPy <-> torch conversion shared by the torch backends (imports torch lazily).

bf16 and the fp8/fp4 types have no NumPy-native dtype: ml_dtypes arrays are reinterpreted through
an integer view of the same width, so conversion is a bit-exact copy (or a zero-copy view on the
CPU), never a value conversion.
"""

from __future__ import annotations

import numpy as np

from w8a8 import dtypes as _dt


def torch_dtype(dtype):
    """The torch dtype of a NumPy / ml_dtypes dtype."""
    import torch

    dtype = np.dtype(dtype)
    table = {
        _dt.bfloat16: torch.bfloat16, _dt.float16: torch.float16, _dt.float32: torch.float32,
        _dt.float64: torch.float64, _dt.int8: torch.int8, _dt.uint8: torch.uint8,
        np.dtype(np.int16): torch.int16, _dt.int32: torch.int32, _dt.int64: torch.int64,
        np.dtype(np.bool_): torch.bool, _dt.float8_e4m3fn: torch.float8_e4m3fn,
        _dt.float8_e5m2: torch.float8_e5m2,
    }
    if dtype == _dt.uint64:
        return torch.uint64
    if dtype == _dt.float8_e8m0fnu:
        return torch.float8_e8m0fnu
    if dtype not in table:
        raise TypeError(f"to_torch: no torch dtype for {dtype}")
    return table[dtype]


def numpy_dtype(tdtype) -> np.dtype:
    """The NumPy / ml_dtypes dtype of a torch dtype."""
    import torch

    table = {
        torch.bfloat16: _dt.bfloat16, torch.float16: _dt.float16, torch.float32: _dt.float32,
        torch.float64: _dt.float64, torch.int8: _dt.int8, torch.uint8: _dt.uint8, torch.int16: np.dtype(np.int16),
        torch.int32: _dt.int32, torch.int64: _dt.int64, torch.bool: np.dtype(np.bool_),
        torch.float8_e4m3fn: _dt.float8_e4m3fn, torch.float8_e5m2: _dt.float8_e5m2,
        torch.uint64: _dt.uint64, torch.float8_e8m0fnu: _dt.float8_e8m0fnu,
    }
    if tdtype not in table:
        raise TypeError(f"from_torch: no NumPy dtype for {tdtype}")
    return table[tdtype]


_VIEW_AS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def to_torch(array: np.ndarray, device: str | None = None):
    """A torch tensor with the same bits (CPU: shares memory when ``array`` is contiguous)."""
    import torch

    array = np.ascontiguousarray(array)
    dtype = array.dtype
    if _via_int_view(dtype):  # ml_dtypes / uint64: through an integer view
        raw = torch.from_numpy(array.view(_VIEW_AS[dtype.itemsize]))
        tensor = raw.view(torch_dtype(dtype))
    else:
        tensor = torch.from_numpy(array)
    return tensor if device in (None, "cpu") else tensor.to(device)


def from_torch(tensor) -> np.ndarray:
    """A NumPy array with the same bits as ``tensor`` (moved to the CPU first)."""
    import torch

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    dtype = numpy_dtype(t.dtype)
    if _via_int_view(dtype):
        int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
        return t.view(int_dtype).numpy().view(dtype)
    return t.numpy()


def _via_int_view(dtype: np.dtype) -> bool:
    """ml_dtypes types (bf16 and the fp8/fp4 family; float8_e5m2 reports kind 'f') and uint64 have no
    direct torch.from_numpy conversion: they cross as an integer view of the same width."""
    return dtype.type.__module__.startswith("ml_dtypes") or dtype == _dt.uint64


def is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "dtype") and hasattr(value, "device")
