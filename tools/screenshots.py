"""Screenshots of the HTML reports for the docs (docs/img/*.png), taken in headless Chromium.

    python tools/screenshots.py                 # every report kind below
    python tools/screenshots.py tune bench      # some of them

Each kind is written by the ``w8a8`` command listed in ``REPORTS`` into a temporary folder, opened at 1280 CSS
pixels wide, and its top part (at most ``MAX_HEIGHT`` px) saved scaled by ``SCALE`` to keep the PNGs small.
Needs Chromium on PATH (Debian: ``apt-get install chromium``) and the test extra (onnxruntime, torchao)."""

from __future__ import annotations

import argparse
import runpy
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
WIDTH, MAX_HEIGHT, SCALE = 1280, 1500, 0.625
MODEL = "tests/modelrun/data"
# kind -> (w8a8 arguments, the report file the command writes into --out)
REPORTS = {
    "conformance-all-pass": (["conformance", "--backend", "torch-cpu", "--op", "quant_matmul", "--op", "dynamic_quant",
                              "--op", "mx_quantize", "--profile", "dev"], "report.html"),
    "conformance-planted": (["conformance", "--backend", "conformance.planted:TiesAwayBackend", "--op", "dynamic_quant"],
                            "report.html"),
    "foreign": (["conformance", "--backend", "onnxruntime", "--backend", "torchao", "--op", "mx_quantize", "--op",
                 "int_matmul", "--op", "w8a8_dynamic_linear", "--profile", "dev"], "report.html"),
    "tune": (["tune", "--backend", "torchao", "--op", "mx_matmul", "--op", "mx_quantize", "--samples", "60"],
             "tune-report.html"),
    "bench": (["bench", "--quick", "--op", "dynamic_quant", "--op", "quant_matmul", "--backend", "numpy", "--backend",
               "torch-cpu", "--max-time", "0.2"], "bench-report.html"),
    "run": (["run", f"{MODEL}/msmodelslim/qwen2-w8a8-dynamic", "--reference", f"{MODEL}/float/qwen2-bf16",
             "--prompts", "examples/model_run_prompts.txt", "--backend", "torch-cpu"], "run.html"),
    "replay": (["replay", "tests/replay/samples/made/planted-tensor-mix"], "report.html"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"report kinds (default all: {', '.join(REPORTS)})")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"), help="folder for KIND.png (default docs/img)")
    args = parser.parse_args(argv)
    unknown = [k for k in args.kinds if k not in REPORTS]
    if unknown:
        parser.error(f"KIND: expected one of {', '.join(REPORTS)}; got {', '.join(unknown)}")
    from w8a8cli.main import main as w8a8

    chromium = SimpleNamespace(**runpy.run_path(str(ROOT / "tools" / "chromium.py")))
    kinds = args.kinds or list(REPORTS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, chromium.Chromium() as browser:
        page = browser.page(WIDTH)
        for kind in kinds:
            cmd, name = REPORTS[kind]
            folder = Path(tmp) / kind
            print(f"w8a8 {' '.join(cmd)} --out {folder}", file=sys.stderr)
            sys.argv = ["w8a8", *cmd, "--out", str(folder)]   # the reports record the command line
            w8a8(cmd + ["--out", str(folder)])      # exit status 1 is expected for the planted and foreign runs
            page.load(folder / name)
            png = page.screenshot(max_height=MAX_HEIGHT, scale=SCALE)
            (out / f"{kind}.png").write_bytes(png)
            print(f"{out / (kind + '.png')}: {len(png) // 1024} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
