"""Writing small AscendV1 checkpoints from float weights, with msModelSlim's export formulas.

:class:`CheckpointWriter` collects tensors and description entries; :meth:`~CheckpointWriter.add_linear`
quantizes one float Linear the way msModelSlim's AscendV1 saver stores it (msModelSlim
``save/ascendv1.py``, formulas from :mod:`w8a8.offline`):

* ``W8A8_DYNAMIC``: ``weight`` int8, ``weight_scale`` fp32 [N, 1], ``weight_offset`` zeros;
* ``W8A8`` (static): ``weight``, ``quant_bias`` int32, ``input_scale`` / ``input_offset`` fp32 [1]
  from a calibration sample, ``deq_scale`` fp32 [N] for a bf16 model or int64 (fp32 bits) otherwise;
  a float bias is folded into ``quant_bias`` (and kept as ``.bias``). ``legacy_scales=True`` also writes
  ``weight_scale`` / ``weight_offset`` as the v0 tool did;
* ``W8A8_MIX``: the static set plus ``weight_scale`` / ``weight_offset``;
* ``FLOAT``: the weight in the model dtype; a float bias on any Linear is fp32, tagged FLOAT.

:meth:`~CheckpointWriter.save` writes the description (globals as ``post_run`` writes them:
version, model_quant_type, group_size, metadata, optional), one weights file or shards of at most
``shard_bytes`` with ``quant_model_weights.safetensors.index.json``, and ``config.json`` (without
``quantization_config``, as the saver removes it). Everything goes into a temporary directory next
to the target, which is renamed into place at the end: an interrupted write leaves no
half-written checkpoint.

:func:`synthetic_checkpoint` builds a whole random DeepSeek-V3 (HF names) or DeepSeek-V4 (native
names) model from a config and a recipe: the way to try the suite without a 300 GB download.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

from w8a8 import dtypes as _dt
from w8a8.offline import calibrate_activation_per_tensor, quantize_weight_per_channel, static_params
from w8a8.rounding import to_float

from .models import TensorSpec, architecture, model_tensors
from .reader import CONFIG, DESCRIPTION, INDEX, WEIGHTS, expected_model_quant_type
from .recipes import Recipe, load_recipe
from .safetensors_io import write_file

WRITABLE = ("FLOAT", "W8A8_DYNAMIC", "W8A8", "W8A8_MIX")


def _seed(name: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


class CheckpointWriter:
    """Collects the tensors and description of an AscendV1 checkpoint; :meth:`save` writes it."""

    def __init__(self, model_dtype="bfloat16"):
        self.model_dtype = _dt.resolve(model_dtype, arg="model_dtype", op="CheckpointWriter")
        if self.model_dtype not in (_dt.bfloat16, _dt.float16, _dt.float32):
            raise ValueError(f"CheckpointWriter: argument 'model_dtype' must be bfloat16, float16 or float32; "
                             f"got {_dt.name(self.model_dtype)}")
        self.tensors: dict[str, np.ndarray] = {}
        self.types: dict[str, str] = {}
        self.globals: dict[str, object] = {"version": "1.0.0", "group_size": 0, "metadata": {}, "optional": {}}

    def _put(self, name: str, array: np.ndarray, tag: str) -> None:
        if name in self.tensors:
            raise ValueError(f"CheckpointWriter: tensor {name!r} added twice")
        self.tensors[name] = np.ascontiguousarray(array)
        self.types[name] = tag

    def add_tensor(self, name: str, array: np.ndarray, tag: str = "FLOAT", *, cast: bool = True) -> None:
        """Store a non-Linear tensor (norm, embedding, ``hc_*``...). Float data is cast to the model
        dtype (rounded to nearest even from fp32) unless ``cast`` is False; integers are kept."""
        array = np.asarray(array)
        if cast and _dt.is_float(array.dtype):
            array = to_float(array.astype(np.float32), self.model_dtype)
        self._put(name, array, tag)

    def add_linear(self, prefix: str, weight: np.ndarray, scheme: str, *, bias: np.ndarray | None = None,
                   calibration: np.ndarray | None = None, legacy_scales: bool = False, seed: int = 0) -> None:
        """Quantize float Linear ``prefix`` (weight ``[N, K]``) as ``scheme`` and store its tensors.

        ``calibration``: activations ``[..., K]`` for a static scheme's per-tensor input scale and
        offset (default: a deterministic standard-normal sample of 64 rows, seeded by the parent
        module so that sibling Linears reading one input share it).
        """
        op = "CheckpointWriter.add_linear"
        if scheme not in WRITABLE:
            raise ValueError(f"{op}: argument 'scheme' must be one of {WRITABLE}; got {scheme!r}")
        w = np.asarray(weight)
        if w.ndim != 2 or not _dt.is_float(w.dtype):
            raise ValueError(f"{op}: argument 'weight' must be a 2-D float array [N, K]; got {w.dtype} {w.shape}")
        n, k = w.shape
        b = None if bias is None else np.asarray(bias, dtype=np.float32)
        if b is not None and b.shape != (n,):
            raise ValueError(f"{op}: argument 'bias' must have shape [{n}]; got {b.shape}")
        if scheme == "FLOAT":
            self._put(prefix + ".weight", to_float(w.astype(np.float32), self.model_dtype), "FLOAT")
            if b is not None:
                self._put(prefix + ".bias", b, "FLOAT")
            return
        q, scale, offset = quantize_weight_per_channel(w.astype(np.float32))
        self._put(prefix + ".weight", q, scheme)
        if scheme == "W8A8_DYNAMIC":
            self._put(prefix + ".weight_scale", scale, scheme)
            self._put(prefix + ".weight_offset", offset, scheme)
            if b is not None:
                self._put(prefix + ".bias", b, "FLOAT")
            return
        if calibration is None:
            # Seeded by the parent module: Linears that read the same input (q_a / kv_a, gate / up) get the
            # same sample and hence the same input_scale / input_offset, as a real calibration gives them.
            parent = prefix.rsplit(".", 1)[0]
            calibration = _seed(parent + "/calibration", seed).standard_normal((64, k)).astype(np.float32)
        in_scale, in_offset = calibrate_activation_per_tensor(np.asarray(calibration, dtype=np.float32))
        deq, qb = static_params(q, scale, in_scale, in_offset, b, model_dtype=self.model_dtype)
        self._put(prefix + ".quant_bias", qb, scheme)
        self._put(prefix + ".input_scale", in_scale, scheme)
        self._put(prefix + ".input_offset", in_offset, scheme)
        self._put(prefix + ".deq_scale", deq, scheme)
        if scheme == "W8A8_MIX" or legacy_scales:
            self._put(prefix + ".weight_scale", scale, scheme)
            self._put(prefix + ".weight_offset", offset, scheme)
        if b is not None:   # folded into quant_bias above, and saved as well (msModelSlim AscendV1Saver)
            self._put(prefix + ".bias", b, "FLOAT")

    def description(self) -> dict:
        """The ``quant_model_description.json`` object: globals first, then the tensor entries."""
        desc = dict(self.globals)
        desc.setdefault("model_quant_type", expected_model_quant_type(self.types.values()) or "FLOAT")
        desc.update(sorted(self.types.items()))
        return desc

    def save(self, out_dir, *, config: dict | None = None, shard_bytes: int | None = None,
             overwrite: bool = False) -> Path:
        """Write the checkpoint directory ``out_dir`` atomically; return its path.

        ``shard_bytes``: cut the weights into shards of at most this many bytes (a larger tensor gets
        a shard of its own) with an index file; None writes one file. FileExistsError when
        ``out_dir`` exists and ``overwrite`` is False.
        """
        out = Path(out_dir)
        if out.exists() and not overwrite:
            raise FileExistsError(f"CheckpointWriter.save: {out} exists (pass overwrite=True to replace it)")
        if shard_bytes is not None and (not isinstance(shard_bytes, int) or shard_bytes <= 0):
            raise ValueError(f"CheckpointWriter.save: argument 'shard_bytes' must be a positive int; got {shard_bytes!r}")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
        try:
            self._write_into(tmp, config, shard_bytes)
            if out.exists():
                old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
                os.replace(out, old / out.name)
                os.replace(tmp, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out

    def _write_into(self, folder: Path, config: dict | None, shard_bytes: int | None) -> None:
        names = sorted(self.tensors)
        shards: list[list[str]] = [[]]
        size = 0
        for name in names:
            nbytes = self.tensors[name].nbytes
            if shard_bytes is not None and shards[-1] and size + nbytes > shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append(name)
            size += nbytes
        if len(shards) == 1:
            write_file(folder / WEIGHTS, self.tensors)
        else:
            weight_map = {}
            for i, group in enumerate(shards, 1):
                fname = f"quant_model_weights-{i:05d}-of-{len(shards):05d}.safetensors"
                write_file(folder / fname, {k: self.tensors[k] for k in group})
                weight_map.update({k: fname for k in group})
            total = sum(t.nbytes for t in self.tensors.values())
            _write_json(folder / INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map})
        _write_json(folder / DESCRIPTION, self.description())
        if config is not None:
            cfg = {k: v for k, v in config.items() if k != "quantization_config"}
            _write_json(folder / CONFIG, cfg)


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _float_weight(spec: TensorSpec, seed: int) -> np.ndarray:
    """A random float32 weight whose rows differ in range (so per-channel scales differ)."""
    rng = _seed(spec.name, seed)
    n, k = spec.shape
    rows = np.exp(rng.normal(0.0, 0.5, (n, 1))).astype(np.float32)
    return (rng.standard_normal((n, k)).astype(np.float32) * rows / np.float32(math.sqrt(k))).astype(np.float32)


def _other_tensor(spec: TensorSpec, seed: int, n_experts: int) -> np.ndarray:
    rng = _seed(spec.name, seed)
    if spec.integer:
        return rng.integers(0, max(n_experts, 1), spec.shape, dtype=np.int32)
    if spec.role == "norm":
        return (1.0 + 0.1 * rng.standard_normal(spec.shape)).astype(np.float32)
    return (0.02 * rng.standard_normal(spec.shape)).astype(np.float32)


def synthetic_writer(config: dict, recipe="auto", *, seed: int = 0, overrides: dict[str, str] | None = None,
                     reference: dict | None = None) -> CheckpointWriter:
    """A :class:`CheckpointWriter` filled with a random model described by ``config``.

    ``recipe``: a :class:`~.recipes.Recipe`, a built-in name or file, or ``"auto"`` (DeepSeek-V4
    configs: ``deepseek_v4_flash_w8a8``; DeepSeek-V3 configs: ``deepseek_v3_2_w8a8``).
    ``overrides``: ``{glob: type}`` applied after the recipe, the first matching glob winning (to
    build unusual or bad checkpoints). ``reference``: a dict that receives ``{module.weight: float32
    weight}`` for every Linear, the float model the checkpoint was exported from.
    """
    from fnmatch import fnmatchcase

    arch = architecture(config)
    if recipe == "auto":
        recipe = "deepseek_v4_flash_w8a8" if arch == "deepseek_v4" else "deepseek_v3_2_w8a8"
    rec: Recipe = load_recipe(recipe)
    writer = CheckpointWriter(config.get("torch_dtype", "bfloat16"))
    n_experts = int(config.get("n_routed_experts", 1))
    for spec in model_tensors(config):
        module = spec.module
        if module is None:
            writer.add_tensor(spec.name, _other_tensor(spec, seed, n_experts), cast=not spec.integer)
            continue
        scheme = rec.predict(module)
        for glob, forced in (overrides or {}).items():
            if fnmatchcase(module, glob):
                scheme = forced
                break
        w = _float_weight(spec, seed)
        if reference is not None:
            reference[spec.name] = w
        writer.add_linear(module, w, scheme, seed=seed)
    return writer


def synthetic_checkpoint(out_dir, config: dict, recipe="auto", *, seed: int = 0, shard_bytes: int | None = None,
                         overrides: dict[str, str] | None = None, reference_dir=None, overwrite: bool = False) -> Path:
    """Write a random AscendV1 checkpoint of the model ``config`` describes (see :func:`synthetic_writer`).

    ``reference_dir``: also write the float weights of every Linear there (``model.safetensors`` plus
    ``config.json``), for ``w8a8 inspect --verify --reference``.
    """
    reference: dict | None = {} if reference_dir is not None else None
    writer = synthetic_writer(config, recipe, seed=seed, overrides=overrides, reference=reference)
    path = writer.save(out_dir, config=config, shard_bytes=shard_bytes, overwrite=overwrite)
    if reference_dir is not None:
        ref = Path(reference_dir)
        ref.mkdir(parents=True, exist_ok=True)
        write_file(ref / "model.safetensors", reference)
        _write_json(ref / CONFIG, config)
    return path
