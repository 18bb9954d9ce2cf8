"""Reading an msModelSlim AscendV1 checkpoint directory (msModelSlim
``msmodelslim/core/quant_service/modelslim_v1/save/ascendv1.py``,
``docs/zh/user_guide/quantization_formats/ascendv1.md``).

Layout::

    quant_model_description.json                     required: tensor name -> quant type, plus globals
    quant_model_weights.safetensors                  one file, or
    quant_model_weights-0000i-of-0000n.safetensors   shards with
    quant_model_weights.safetensors.index.json       {"metadata": {...}, "weight_map": {name: shard}}
    config.json                                      the HF config (``torch_dtype`` decides deq_scale)

:meth:`Checkpoint.open` parses the description and every shard header (no tensor data), checks
that the files hang together (index vs shard contents) and raises :class:`CheckpointError` for
what makes the directory unreadable; problems with single tensors are collected as findings
(:attr:`Checkpoint.findings`) so that one bad tensor does not hide the others. Tensor data comes
from memory maps, lazily (:meth:`Checkpoint.tensor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from w8a8 import dtypes as _dt

from . import safe_files
from .issues import CheckpointError, Findings
from .safetensors_io import MappedFile, SafetensorsError, TensorEntry, validate_with_safetensors

DESCRIPTION = "quant_model_description.json"
WEIGHTS = "quant_model_weights.safetensors"
INDEX = "quant_model_weights.safetensors.index.json"
CONFIG = "config.json"

GLOBAL_KEYS = frozenset({
    "version", "model_quant_type", "group_size", "metadata", "optional", "is_rot_used",
    "kv_cache_type", "kv_quant_type", "fa_quant_type", "indexer_quant_type", "reduce_quant_type",
    "ignore", "packed_modules_mapping",
})
"""Description keys that are metadata, not tensor names (msModelSlim ``post_run`` and loader extras)."""

MODEL_QUANT_TYPE_PRIORITY = (
    "FLOAT", "W16A16S", "W8A16", "W8A8_DYNAMIC", "W8A8_MIX", "W8A8", "WFP8AFP8_DYNAMIC", "W8A8_MXFP8",
    "W4A8_MXFP", "W4A4_DYNAMIC", "W4A4_MXFP4", "W4A4_MXFP4_DUALSCALE", "W4A4_MXFP4_SVD",
)
"""msModelSlim's ``model_quant_type`` order, lowest to highest (``W4A8_DYNAMIC`` deliberately absent)."""


@dataclass
class Description:
    """``quant_model_description.json`` split into tensor types and global entries."""

    types: dict[str, str] = field(default_factory=dict)     # tensor name -> quant type
    globals: dict[str, object] = field(default_factory=dict)

    @property
    def model_quant_type(self) -> str | None:
        value = self.globals.get("model_quant_type")
        return value if isinstance(value, str) else None

    @property
    def group_size(self) -> int:
        value = self.globals.get("group_size", 0)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def expected_model_quant_type(types) -> str | None:
    """The ``model_quant_type`` msModelSlim would write for these tensor types (None if none ranks)."""
    ranked = [t for t in set(types) if t in MODEL_QUANT_TYPE_PRIORITY]
    return max(ranked, key=MODEL_QUANT_TYPE_PRIORITY.index) if ranked else None


def parse_description(raw: dict, findings: Findings, where: str = DESCRIPTION) -> Description:
    """Split a loaded description dict; a non-string tensor entry is an error finding."""
    desc = Description()
    for key, value in raw.items():
        if key in GLOBAL_KEYS:
            desc.globals[key] = value
        elif isinstance(value, str):
            desc.types[key] = value
        elif "." not in key and isinstance(value, (dict, list, int, float, bool)):
            desc.globals[key] = value
            findings.info(where, f"unrecognised global entry {key!r} kept as metadata", "unknown-global")
        else:
            findings.error(key, f"description entry must be a quant-type string (e.g. \"W8A8_DYNAMIC\"); "
                                f"got {type(value).__name__} {value!r:.60}", "bad-description-entry")
    return desc


def _load_json(path: Path, what: str):
    """A JSON file of the checkpoint: a regular file (no FIFO), depth-limited (:mod:`checkpoints.safe_files`)."""
    return safe_files.load_json(path, what, CheckpointError)


class Checkpoint:
    """An AscendV1 checkpoint directory, opened lazily (headers parsed, no tensor data read)."""

    def __init__(self, path: Path, description: Description, config: dict | None,
                 files: dict[str, MappedFile], entries: dict[str, TensorEntry], findings: Findings):
        self.path = path
        self.description = description
        self.config = config
        self.files = files
        self.entries = entries
        self.findings = findings

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def open(cls, path, *, check_with_safetensors: bool = True) -> "Checkpoint":
        """Open checkpoint directory ``path``.

        Raises :class:`CheckpointError` when ``path`` is not a directory, the description is missing
        or not a JSON object, there are no weight files, the index is unreadable or names a shard
        that does not exist, or a shard is not a valid safetensors file. Everything else is a
        finding (see :attr:`findings`).
        """
        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(f"{path}: not a directory (an AscendV1 checkpoint is a directory holding "
                                  f"{DESCRIPTION} and {WEIGHTS} or its shards)")
        findings = Findings()
        desc_path = path / DESCRIPTION
        if not desc_path.exists() and not desc_path.is_symlink():
            raise CheckpointError(f"{path}: {DESCRIPTION} is missing: SGLang and vllm-ascend recognise a "
                                  "ModelSlim checkpoint and decide every layer's scheme from this file")
        safe_files.contained(path, desc_path, DESCRIPTION, CheckpointError)
        raw = _load_json(desc_path, DESCRIPTION)
        if not isinstance(raw, dict):
            raise CheckpointError(f"{desc_path}: must be a JSON object of tensor name -> quant type; got "
                                  f"{type(raw).__name__}")
        description = parse_description(raw, findings)
        config = None
        cfg_path = path / CONFIG
        if cfg_path.exists() or cfg_path.is_symlink():
            safe_files.contained(path, cfg_path, CONFIG, CheckpointError)
            config = _load_json(cfg_path, CONFIG)
            if not isinstance(config, dict):
                raise CheckpointError(f"{cfg_path}: must be a JSON object; got {type(config).__name__}")
        else:
            findings.warning(CONFIG, "missing: the model dtype (which decides deq_scale's dtype) and the "
                                     "architecture are unknown", "no-config")
        files, entries = cls._open_weights(path, findings, check_with_safetensors)
        return cls(path, description, config, files, entries, findings)

    @staticmethod
    def _open_file(file: Path, check: bool) -> MappedFile:
        try:
            mapped = MappedFile(file)  # the project's parser first: it refuses FIFOs, overlaps, bad types
            if check:
                validate_with_safetensors(file)
            return mapped
        except SafetensorsError as exc:
            raise CheckpointError(str(exc)) from None

    @classmethod
    def _open_weights(cls, path: Path, findings: Findings, check: bool):
        index_path = path / INDEX
        files: dict[str, MappedFile] = {}
        entries: dict[str, TensorEntry] = {}
        if index_path.exists() or index_path.is_symlink():
            safe_files.contained(path, index_path, INDEX, CheckpointError)
            index = _load_json(index_path, INDEX)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise CheckpointError(f"{index_path}: must hold \"weight_map\": {{tensor name: shard file}}")
            for shard in sorted(set(weight_map.values())):
                file = safe_files.inside(path, shard, index_path, "shard", CheckpointError)
                files[shard] = cls._open_file(file, check)
            for name, shard in weight_map.items():
                entry = files[shard].entries.get(name)
                if entry is None:
                    findings.error(name, f"{INDEX} places it in {shard}, but that shard does not hold it",
                                   "index-mismatch")
                else:
                    entries[name] = entry
            for shard, mf in files.items():
                for name in mf.entries:
                    if weight_map.get(name) != shard:
                        findings.error(name, f"stored in {shard} but the index "
                                       + ("does not list it" if name not in weight_map
                                          else f"places it in {weight_map[name]}"), "index-mismatch")
            return files, entries
        single = path / WEIGHTS
        candidates = [single] if single.exists() or single.is_symlink() else \
            sorted(path.glob("quant_model_weights*.safetensors"))
        candidates = [safe_files.contained(path, c, "weights file", CheckpointError) for c in candidates]
        if not candidates:
            raise CheckpointError(f"{path}: no weights: expected {WEIGHTS}, or shards "
                                  f"quant_model_weights-0000i-of-0000n.safetensors with {INDEX}")
        if len(candidates) > 1:
            findings.warning(INDEX, f"missing: {len(candidates)} weight shards found without an index; "
                                    "reading all of them", "no-index")
        for file in candidates:
            mf = files[file.name] = cls._open_file(file, check)
            for name, entry in mf.entries.items():
                if name in entries:
                    findings.error(name, f"stored twice: in {entries[name].path.name} and {file.name}",
                                   "duplicate-tensor")
                else:
                    entries[name] = entry
        return files, entries

    # -- contents -----------------------------------------------------------------------------------
    @property
    def model_dtype(self) -> np.dtype | None:
        """The model's dtype from config.json (``torch_dtype``, or ``dtype`` in newer transformers)."""
        if not self.config:
            return None
        value = self.config.get("torch_dtype", self.config.get("dtype"))
        if not isinstance(value, str):
            return None
        try:
            dt = _dt.resolve(value)
        except TypeError:
            return None
        return dt if isinstance(dt, np.dtype) else None

    def tensor(self, name: str) -> np.ndarray:
        """The stored tensor ``name``: a read-only memory-mapped view, dtype and shape as stored."""
        if name not in self.entries:
            raise KeyError(f"{self.path}: no tensor {name!r} in the weights")
        entry = self.entries[name]
        return self.files[entry.path.name].tensor(name)

    def tensor_set_findings(self) -> Findings:
        """Description entries without a tensor, and tensors without a description entry (errors)."""
        found = Findings()
        for name in sorted(set(self.description.types) - set(self.entries)):
            found.error(name, f"in {DESCRIPTION} (as {self.description.types[name]}) but not in the weights",
                        "missing-in-weights")
        for name in sorted(set(self.entries) - set(self.description.types)):
            hint = " (vllm-ascend expects MTP layers added to the description, as FLOAT)" if "mtp" in name else ""
            found.error(name, f"in the weights but not in {DESCRIPTION}: the loader cannot tell its quant type"
                              + hint, "missing-in-description")
        expected = expected_model_quant_type(self.description.types.values())
        actual = self.description.model_quant_type
        if actual is not None and expected is not None and actual != expected:
            found.warning("model_quant_type", f"is {actual!r}, but msModelSlim would write {expected!r} "
                                              "(the highest-priority type among the tensors)", "model-quant-type")
        return found
