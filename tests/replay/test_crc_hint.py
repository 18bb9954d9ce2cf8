"""The crc-mismatch hint names the msprobe config that dumps the call: ``list`` takes API names.

msprobe (26.2.0, ``core/dump/data_dump/scope.py`` ``check_api_list``) dumps an entry when a string of
``list`` is a substring of its API name (``NPU.npu_dynamic_quant.2.forward``); the hint used to say
``list: ["output.1"]`` — an output slot, which matches no API name, so the user's dump came back empty.
"""

from __future__ import annotations

import json
import re


def test_crc_mismatch_hint_lists_the_api_name(samples, run_replay):
    by_name, _ = run_replay(samples.planted_md5, inputs=[str(samples.planted)])
    rec = by_name["NPU.npu_dynamic_quant.2.forward"]
    assert rec["verdict"] == "crc-mismatch"
    note = rec["outputs"]["scale"]["note"]
    listed = json.loads(re.search(r'"list": (\[[^\]]*\])', note).group(1))
    assert listed == ["NPU.npu_dynamic_quant.2.forward"]
    assert '"task": "tensor"' in note
    assert "output." not in note
