"""The ``w8a8`` command line: a thin dispatcher.

Each subcommand is one module of this package (``<name>_cmd.py``) with ``HELP``, ``add_arguments(parser)``
and ``run(args) -> exit status``; it parses and validates its arguments and calls the package that does the
work (:mod:`conformance`, :mod:`bench`, :mod:`checkpoints`, :mod:`deployment`, ...).
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, str] = {
    "conformance": "w8a8cli.conformance_cmd",
    "backends": "w8a8cli.backends_cmd",
    "tune": "w8a8cli.tune_cmd",
    "bench": "w8a8cli.bench_cmd",
    "estimate": "w8a8cli.estimate_cmd",
    "inspect": "w8a8cli.inspect_cmd",
    "replay": "w8a8cli.replay_cmd",
    "run": "w8a8cli.run_cmd",
    "explain": "w8a8cli.explain_cmd",
    "compare": "w8a8cli.compare_cmd",
}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``w8a8 <cmd>: error: --flag: ...``, exit status 2."""

    def error(self, message: str):
        if message.startswith("argument "):
            message = message[len("argument "):]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _modules() -> dict:
    found = {}
    for name, module in COMMANDS.items():
        try:
            found[name] = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the command exists but a dependency is missing: still list it
                found[name] = exc
    return found


def build_parser() -> argparse.ArgumentParser:
    from w8a8 import __version__

    parser = OneLineParser(
        prog="w8a8",
        description="Reference-and-accelerated numerics for quantized LLM inference: conformance of "
                    "backends against the NumPy golden, tolerance tuning, benchmarks, checkpoints.")
    parser.add_argument("--version", action="version", version=f"w8a8 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, module in _modules().items():
        if isinstance(module, Exception):
            p = sub.add_parser(name, help=f"(unavailable: {module})")
            p.set_defaults(_missing=module)
            continue
        p = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, check and run one command. A user error (a :class:`~w8a8cli.validate.UsageError` raised by a
    command's checks, or argparse's own) is one line on stderr and exit status 2, never a traceback."""
    from conformance.stateio import StateError

    from .validate import UsageError

    parser = build_parser()
    args = parser.parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # the command line, as given (provenance)
    if getattr(args, "_missing", None) is not None:
        exc = args._missing
        print(f"w8a8 {args.command}: a dependency is missing ({exc.name}). "
              "Install the command-line extras: pip install 'w8a8[cli]'", file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UsageError as exc:
        print(f"w8a8 {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except StateError as exc:  # a state file that cannot be read or written (a full disk, a FIFO, damage)
        print(f"w8a8 {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        print(f"w8a8 {args.command}: a dependency is missing ({exc.name}). "
              "Install the command-line extras: pip install 'w8a8[cli]'", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
