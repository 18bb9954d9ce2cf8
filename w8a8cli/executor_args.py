"""The ``--executor`` options shared by ``w8a8 conformance`` and ``w8a8 tune``: where the cases run.

``--executor local`` (default): this machine's worker pool. ``--executor ray``: batches of cases as Ray
tasks (:mod:`conformance.executors.ray_executor`) on a local Ray started for the run (``--workers`` CPUs), or
on the cluster ``--ray-address`` names (``auto``: the cluster this machine belongs to; ``HOST:PORT``)."""

from __future__ import annotations

import re

from . import validate

_ADDRESS = re.compile(r"^(auto|[A-Za-z0-9_.\-\[\]:]+:\d{1,5})$")


def add_arguments(parser) -> None:
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the cases run: local (this machine's worker pool, default) or ray (batches of "
                             "cases as Ray tasks over a Ray cluster; needs the 'ray' extra)")
    parser.add_argument("--ray-address", metavar="auto|HOST:PORT",
                        help="with --executor ray: the cluster to join ('auto': the one this machine is part of); "
                             "default: a local Ray started for the run with --workers CPUs")
    parser.add_argument("--batch-size", type=validate.integer(1, 100000), default=None, metavar="N",
                        help="with --executor ray: cases per Ray task (default 32, chosen from the measured per-task "
                             "overhead: see docs/distributed.md)")


def check(args) -> None:
    """``--ray-address`` / ``--batch-size`` only with ``--executor ray``, an address of the right form, and Ray
    importable (:class:`~w8a8cli.validate.UsageError` otherwise)."""
    if args.executor != "ray":
        for flag, value in (("--ray-address", args.ray_address), ("--batch-size", args.batch_size)):
            if value is not None:
                raise validate.UsageError(flag, "--executor ray alongside it", f"--executor {args.executor}")
        return
    if args.ray_address is not None and not _ADDRESS.match(args.ray_address):
        raise validate.UsageError("--ray-address", "'auto' or HOST:PORT", repr(args.ray_address))
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise validate.UsageError("--executor", "Ray installed for 'ray' (pip install 'w8a8[ray]')",
                                  f"no module ray ({exc})") from None


def make(args, cpus: int):
    """The Ray executor these arguments ask for (not started), or None for the local pool."""
    if args.executor != "ray":
        return None
    from conformance.executors import make as make_executor
    from conformance.executors.ray_executor import DEFAULT_BATCH_SIZE

    return make_executor("ray", address=args.ray_address, batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
                         num_cpus=max(1, cpus))
