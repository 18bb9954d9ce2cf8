"""torchao's import-time notices on a CPU-only torch are captured, not printed; other log records pass.

The messages are as torchao 0.18 formats them (``torchao/__init__.py``: ``logger.warning(f"Failed to load
{file}: {e}")`` for each ``_C*.so`` that ``torch.ops.load_library`` refuses)."""

from __future__ import annotations

import logging


def test_only_those_notices_are_dropped(caplog):
    from backends.torchao.quiet import CAPTURED, import_torchao

    log = logging.getLogger("torchao")
    with caplog.at_level(logging.WARNING, logger="torchao"), import_torchao():
        log.warning("Failed to load /x/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: Could not "
                    "load this library")
        log.warning("Failed to load config.json")       # another message of the same logger
        log.warning("Failed to load /x/torchao/mine.so")  # not one of torchao's own _C extensions
    assert [r.getMessage() for r in caplog.records] == ["Failed to load config.json",
                                                        "Failed to load /x/torchao/mine.so"]
    assert CAPTURED[-1].startswith("Failed to load /x/site-packages/torchao/_C_mxfp8")
    with caplog.at_level(logging.WARNING, logger="torchao"):
        log.warning("Failed to load /x/site-packages/torchao/_C_mxfp8.so")   # outside the block: logged
    assert caplog.records[-1].getMessage().endswith("_C_mxfp8.so")
