"""Copy a DeepSeek-V3 msModelSlim checkpoint with the router correction bias put back from its float model.

msModelSlim 26.1.0's saver leaves ``mlp.gate.e_score_correction_bias`` out of a DeepSeek-V3 checkpoint;
``w8a8 run`` names it as the main cause of changed expert choices. This writes ``OUT``: a copy of ``CKPT``
whose weights also hold each such bias from ``FLOAT_DIR``'s safetensors (stored FLOAT, in the float model's
dtype), the description and index updated to match. Nothing else changes.

    python examples/restore_router_bias.py CKPT FLOAT_DIR OUT
    w8a8 run OUT --reference FLOAT_DIR --prompts examples/model_run_prompts.txt
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from checkpoints.safetensors_io import MappedFile, write_file

BIAS = "mlp.gate.e_score_correction_bias"


def restore(ckpt: Path, reference: Path, out: Path) -> list[str]:
    """Write the copy; the names of the biases put back."""
    shutil.copytree(ckpt, out)
    index_path = out / "quant_model_weights.safetensors.index.json"
    index = json.loads(index_path.read_text())
    (shard,) = sorted(set(index["weight_map"].values()))
    mf = MappedFile(out / shard)
    tensors = {k: np.array(mf.tensor(k)) for k in mf.entries}
    del mf
    added = []
    for path in sorted(reference.glob("*.safetensors")):
        ref = MappedFile(path)
        for name in ref.entries:
            if name.endswith(BIAS) and name not in tensors:
                tensors[name] = np.array(ref.tensor(name))
                added.append(name)
    if not added:
        return []
    desc_path = out / "quant_model_description.json"
    desc = json.loads(desc_path.read_text())
    desc.update({name: "FLOAT" for name in added})
    write_file(out / shard, tensors)
    index["weight_map"] = {k: shard for k in sorted(tensors)}
    index_path.write_text(json.dumps(index))
    desc_path.write_text(json.dumps(desc, indent=1))
    return added


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", type=Path, metavar="CKPT")
    parser.add_argument("reference", type=Path, metavar="FLOAT_DIR")
    parser.add_argument("out", type=Path, metavar="OUT", help="a folder that does not exist yet")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"OUT: expected a folder that does not exist yet, got {str(args.out)!r}")
    added = restore(args.ckpt, args.reference, args.out)
    if not added:
        shutil.rmtree(args.out)
        print(f"restore_router_bias: {args.reference} has no {BIAS} missing from {args.ckpt}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {len(added)} bias(es) put back ({', '.join(added)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
