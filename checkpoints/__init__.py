"""msModelSlim AscendV1 W8A8 checkpoints: read, resolve, inspect, verify, write.

* :mod:`.reader` — the checkpoint directory (description, sharded safetensors, config), lazily.
* :mod:`.naming` — DeepSeek-V4 native names and the loaders' remapping, packed modules, experts.
* :mod:`.schemes` — scheme resolution exactly as SGLang / vllm-ascend do it.
* :mod:`.validate` — the tensors each type must carry, and their values.
* :mod:`.inspect` — the execution path of every module (``w8a8 inspect``).
* :mod:`.verify` — real weights through a backend against the golden (``--verify``), on real or
  synthetic activations.
* :mod:`.reference` — whether a float ``--reference`` is the checkpoint's float model.
* :mod:`.models`, :mod:`.recipes` — DeepSeek module lists and msModelSlim recipes.
* :mod:`.writer` — small synthetic checkpoints with msModelSlim's export formulas.
"""

from .inspect import Report, analyze
from .issues import CheckpointError, Issue
from .models import model_tensors, tiny_config
from .reader import Checkpoint
from .recipes import BUILTIN as BUILTIN_RECIPES, Recipe, load_recipe
from .schemes import resolve
from .verify import verify
from .writer import CheckpointWriter, synthetic_checkpoint

__all__ = ["Checkpoint", "CheckpointError", "Issue", "Report", "analyze", "resolve", "verify",
           "Recipe", "load_recipe", "BUILTIN_RECIPES", "model_tensors", "tiny_config",
           "CheckpointWriter", "synthetic_checkpoint"]
