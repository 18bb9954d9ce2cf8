"""msModelSlim-style quantization recipes: which Linear gets which AscendV1 type.

A recipe is the ``spec.process`` list of an msModelSlim ``modelslim_v1`` YAML, as data. The steps
that decide types are ``linear_quant`` (a ``qconfig`` plus ``include`` / ``exclude`` glob lists)
and ``group`` (a list of ``linear_quant`` configs); other steps (``quarot``, ``flex_smooth_quant``,
...) change weights, not types, and are kept for information. A Linear that no step quantizes stays
``FLOAT``.

Visited modules: msModelSlim's layer-wise runner visits the **decoder layers** only
(``generated_decoder_layer_visit_func``: ``model.layers.{L}``, DeepSeek-V4's ``layers.{L}`` /
``mtp.{i}``), so ``lm_head``, the embedding and every other module outside a layer stay ``FLOAT``
whatever the globs say (``include: ["*"]`` quantizes every Linear *of the layers*).

Matching: ``fnmatch.fnmatchcase`` of the glob against the full module name (``*`` crosses dots),
as msModelSlim's include/exclude wildcards; a module is taken by a step when some include matches
and no exclude does. Precedence (**not confirmed**, chosen and tested): across sequential steps the
*first* step that takes a module wins (the module is a quantized IR afterwards, no longer a Linear
for the next ``linear_quant``); inside a ``group`` the *last* matching config wins (msModelSlim's
examples use a group as "default for all, then overrides"). For the shipped DeepSeek-V4-Flash
recipe the two steps select disjoint modules, so the choice does not matter there.

qconfig -> type: int8 per-channel symmetric weights with per-token symmetric int8 activations are
``W8A8_DYNAMIC``; with per-tensor int8 activations ``W8A8`` (static); float activations ``W8A16``;
int4 weights with per-token int8 activations ``W4A8_DYNAMIC``. Anything else is refused.

Recipes load from the built-ins (:data:`BUILTIN`), a JSON file with the YAML's structure, or the
msModelSlim YAML itself when PyYAML is installed.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from . import safe_files
from .naming import layer_of

W8A8_DYNAMIC_QCONFIG = {
    "act": {"scope": "per_token", "dtype": "int8", "symmetric": True, "method": "minmax"},
    "weight": {"scope": "per_channel", "dtype": "int8", "symmetric": True, "method": "minmax"},
}
W8A8_STATIC_QCONFIG = {
    "act": {"scope": "per_tensor", "dtype": "int8", "symmetric": False, "method": "minmax"},
    "weight": {"scope": "per_channel", "dtype": "int8", "symmetric": True, "method": "minmax"},
}

DEEPSEEK_V4_FLASH_W8A8: dict = {
    "apiversion": "modelslim_v1",
    "metadata": {
        "config_id": "deepseek_v4_flash_w8a8",
        "verified": {"framework": "vLLM-Ascend", "hardware": "Atlas_A3_Inference"},
        "source": "msModelSlim lab_practice/deepseek_v4/deepseek_v4_flash_w8a8.yaml @ 3de0a3c4 "
                  "(the DeepSeek-V4-Flash W8A8 recipe of msModelSlim)",
    },
    "spec": {
        "process": [
            {"type": "quarot", "block_size": 32},
            {"type": "flex_smooth_quant", "enable_subgraph_type": ["norm-linear"]},
            {"type": "linear_quant", "qconfig": W8A8_DYNAMIC_QCONFIG,
             "include": ["*attn*"],
             "exclude": ["*wo_a", "*wo_b", "*compressor.wgate", "*compressor.wkv", "*indexer.weights_proj",
                         "*indexer.compressor.wgate", "*indexer.compressor.wkv"]},
            {"type": "linear_quant", "qconfig": W8A8_DYNAMIC_QCONFIG,
             "include": ["*ffn*"],
             "exclude": ["*gate"]},
        ],
        "save": [{"type": "ascendv1_saver", "part_file_size": 4}],
    },
}
"""The DeepSeek-V4-Flash W8A8 recipe: W8A8_DYNAMIC on attention and FFN Linears, with the output
projections, compressor / indexer projections and the router left FLOAT. (The YAML's static
``default_w8a8`` anchor is unused and therefore not listed.)"""

DEEPSEEK_V3_2_W8A8: dict = {
    "apiversion": "modelslim_v1",
    "metadata": {
        "config_id": "deepseek_v3_2_w8a8",
        "source": "msModelSlim lab_practice/deepseek_v3_2/deepseek_w8a8.yaml, reconstructed from its public "
                  "description; not a verbatim copy",
    },
    "spec": {
        "process": [
            {"type": "linear_quant", "qconfig": W8A8_STATIC_QCONFIG,
             "include": ["*self_attn*"], "exclude": ["*kv_b_proj", "*wq_b", "*wk", "*weights_proj"]},
            {"type": "linear_quant", "qconfig": W8A8_DYNAMIC_QCONFIG,
             "include": ["*mlp*"], "exclude": ["*gate"]},
        ],
        "save": [{"type": "ascendv1_saver", "part_file_size": 4}],
    },
}
"""The "static attention + dynamic MLP/MoE" mix typical of DeepSeek-V3-family W8A8 checkpoints."""

BUILTIN: dict[str, dict] = {
    "deepseek_v4_flash_w8a8": DEEPSEEK_V4_FLASH_W8A8,
    "deepseek_v3_2_w8a8": DEEPSEEK_V3_2_W8A8,
}


def qconfig_scheme(qconfig: dict) -> str:
    """The AscendV1 type a ``linear_quant`` qconfig produces (ValueError for combinations it cannot name)."""
    if not isinstance(qconfig, dict):
        raise ValueError(f"recipe: 'qconfig' must be a mapping with 'act' and 'weight'; got {qconfig!r}")
    act, weight = qconfig.get("act") or {}, qconfig.get("weight") or {}
    a_dt, w_dt = str(act.get("dtype", "")).lower(), str(weight.get("dtype", "")).lower()
    a_scope, w_scope = act.get("scope"), weight.get("scope")
    if w_dt == "int8" and w_scope in ("per_channel", "per_group") and weight.get("symmetric", True):
        if a_dt == "int8" and a_scope == "per_token" and act.get("symmetric", True):
            return "W8A8_DYNAMIC"
        if a_dt == "int8" and a_scope == "per_tensor":
            return "W8A8"
        if a_dt in ("float16", "bfloat16", "fp16", "bf16"):
            return "W8A16"
    if w_dt == "int4" and a_dt == "int8" and a_scope == "per_token":
        return "W4A8_DYNAMIC"
    raise ValueError(f"recipe: cannot name the AscendV1 type of qconfig act={act} weight={weight} "
                     "(known: W8A8_DYNAMIC, W8A8, W8A16, W4A8_DYNAMIC)")


@dataclass(frozen=True)
class Rule:
    scheme: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    step: int                       # index in spec.process

    def takes(self, module: str) -> bool:
        return (any(fnmatchcase(module, g) for g in self.include)
                and not any(fnmatchcase(module, g) for g in self.exclude))


@dataclass
class Recipe:
    """Parsed recipe: ``stages`` in order; inside a stage (a ``group``) the last matching rule wins."""

    name: str
    stages: list[list[Rule]]
    source: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, name: str | None = None, default_name: str = "recipe") -> "Recipe":
        if not isinstance(data, dict):
            raise ValueError(f"recipe: must be a mapping (the msModelSlim YAML structure); got {type(data).__name__}")
        spec = data.get("spec", data)
        process = spec.get("process") if isinstance(spec, dict) else None
        if not isinstance(process, list):
            raise ValueError("recipe: needs 'spec: process: [...]' (a list of steps)")
        stages: list[list[Rule]] = []
        for i, step in enumerate(process):
            if not isinstance(step, dict) or "type" not in step:
                raise ValueError(f"recipe: process step {i} must be a mapping with 'type'; got {step!r}")
            if step["type"] == "linear_quant":
                stages.append([_rule(step, i)])
            elif step["type"] == "group":
                configs = step.get("configs")
                if not isinstance(configs, list):
                    raise ValueError(f"recipe: group step {i} needs 'configs: [...]'")
                stages.append([_rule(c, i) for c in configs if isinstance(c, dict) and c.get("type") == "linear_quant"])
        meta = data.get("metadata") or {}
        return cls(name or meta.get("config_id") or default_name, stages, copy.deepcopy(data))

    def predict(self, module: str) -> str:
        """The type this recipe gives Linear ``module`` (``"FLOAT"`` when no step takes it)."""
        return self.explain(module)[0]

    def explain(self, module: str) -> tuple[str, Rule | None]:
        if layer_of(module) == "model":      # not inside a decoder layer: never visited (module docstring)
            return "FLOAT", None
        for stage in self.stages:
            hit = None
            for rule in stage:
                if rule.takes(module):
                    hit = rule
            if hit is not None:
                return hit.scheme, hit
        return "FLOAT", None

    def apply(self, modules) -> dict[str, str]:
        """``{module: type}`` for every module name in ``modules``."""
        return {m: self.predict(m) for m in modules}


def _rule(step: dict, index: int) -> Rule:
    include, exclude = step.get("include", ["*"]), step.get("exclude", [])
    for arg, value in (("include", include), ("exclude", exclude)):
        if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
            raise ValueError(f"recipe: step {index}: '{arg}' must be a list of glob strings; got {value!r}")
    return Rule(qconfig_scheme(step.get("qconfig")), tuple(include), tuple(exclude), index)


def load_recipe(spec) -> Recipe:
    """A :class:`Recipe` from a built-in name, a dict, a JSON file, or a YAML file (needs PyYAML)."""
    if isinstance(spec, Recipe):
        return spec
    if isinstance(spec, dict):
        return Recipe.from_dict(spec)
    if isinstance(spec, str) and spec in BUILTIN:
        return Recipe.from_dict(BUILTIN[spec], spec)
    path = Path(spec)
    if not (path.exists() or path.is_symlink()):
        raise ValueError(f"recipe: {spec!r} is neither a built-in ({', '.join(BUILTIN)}) nor a file")
    text = safe_files.read_text(path, "recipe", ValueError, limit=16 << 20)  # a regular file: no FIFO hang
    if path.suffix.lower() in (".yaml", ".yml"):
        data = _load_yaml(path, text)
    else:
        data = safe_files.loads_json(text, path, "recipe (JSON)", ValueError)
    return Recipe.from_dict(data, default_name=path.stem)


_LANGUAGE_TAG = re.compile(r"!!?python|!<tag:yaml\.org,2002:python", re.IGNORECASE)


def _load_yaml(path: Path, text: str):
    """A YAML recipe as plain data: ``yaml.safe_load`` only, and a ``!!python`` tag refused by name (it
    asks to build Python objects, which a recipe never needs). Every YAML error is a ValueError naming
    the file."""
    try:
        import yaml
    except ModuleNotFoundError:
        raise ValueError(f"recipe: {path} is YAML and PyYAML is not installed: pip install pyyaml, or convert "
                         "the recipe to JSON with the same structure") from None
    tag = _LANGUAGE_TAG.search(text)
    if tag:
        line = text.count("\n", 0, tag.start()) + 1
        raise ValueError(f"recipe: {path}: line {line}: must be plain YAML data (recipes are read with "
                         f"yaml.safe_load); got the language tag {tag.group(0)!r}")
    depth = safe_files.json_depth(text)  # flow collections ([...], {...}) nest like JSON's
    if depth > safe_files.MAX_JSON_DEPTH:
        raise ValueError(f"recipe: {path}: must nest at most {safe_files.MAX_JSON_DEPTH} levels; got {depth}")
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        what = str(exc).replace("\n", " ")[:300] if not isinstance(exc, RecursionError) else "nested too deeply"
        raise ValueError(f"recipe: {path}: must be plain YAML data; got {type(exc).__name__}: {what}") from None


@dataclass(frozen=True)
class Mismatch:
    module: str
    predicted: str
    actual: str | None              # None: the module is not in the checkpoint


def diff(recipe: Recipe, actual: dict[str, str], expected_modules=None) -> list[Mismatch]:
    """Compare the recipe's prediction with a checkpoint's ``{module: type}``.

    ``expected_modules`` (e.g. from :func:`~checkpoints.models.linear_modules`) adds the
    modules the model should have but the checkpoint lacks.
    """
    out = [Mismatch(m, recipe.predict(m), t) for m, t in sorted(actual.items()) if recipe.predict(m) != t]
    if expected_modules is not None:
        out += [Mismatch(m, recipe.predict(m), None) for m in expected_modules if m not in actual]
    return out


def checkpoint_linear_types(checkpoint) -> dict[str, str]:
    """``{native Linear module: type of its .weight}`` for a checkpoint (every 2-D ``.weight``)."""
    out = {}
    for name, t in checkpoint.description.types.items():
        if name.endswith(".weight"):
            entry = checkpoint.entries.get(name)
            if entry is not None and len(entry.shape) != 2:
                continue
            module = name[: -len(".weight")]
            if entry is None and module.rsplit(".", 1)[-1].endswith("norm"):
                continue
            if module.rsplit(".", 1)[-1] in ("embed", "embed_tokens", "tok_emb"):
                continue
            out[module] = t
    return out
