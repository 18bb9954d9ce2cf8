"""Every conformance record names the kernel variant the golden modelled; reports count them per op."""

from __future__ import annotations

import w8a8
from backends.numpy_backend import NumpyBackend
from conformance import registry
from conformance.evaluate import run_case
from conformance.reports import build_summary, markdown


def _named(key: str, backend) -> dict:
    op = key.split("/")[0]
    return run_case(registry.get(op), {"named": key}, backend, kind="named", name=key)


def test_records_name_the_selected_variant_on_both_sides_of_the_single_row_threshold():
    # 3 x 4096 runs the multi-row kernel (key 10), 4 x 4096 the single-row kernel (key 100), 64 x 20000 the
    # large-shape kernel (key 6): w8a8.variants.dynamic_quant's rule, pinned in tests/golden/test_variants.py
    backend = NumpyBackend()
    labels = {k: _named(f"dynamic_quant/{k}", backend)["variant"]
              for k in ("variant_rows3_h4096_multi_row", "variant_rows4_h4096_single_row",
                        "variant_rows64_h20000_large_shape")}
    assert labels == {"variant_rows3_h4096_multi_row": "dynamic_quant/multi-row[10]",
                      "variant_rows4_h4096_single_row": "dynamic_quant/single-row[100]",
                      "variant_rows64_h20000_large_shape": "dynamic_quant/large-shape[6]"}


def test_a_fixed_record_is_named_fixed_and_an_op_without_variants_has_none():
    fixed = NumpyBackend(w8a8.ASCEND.replace(variants="fixed"))
    assert _named("dynamic_quant/variant_rows4_h4096_single_row", fixed)["variant"] == "fixed"
    rec = run_case(registry.get("trans_quant_param"), {"named": registry.named_cases("trans_quant_param")[0].key},
                   NumpyBackend(), kind="named", name=registry.named_cases("trans_quant_param")[0].key)
    assert "variant" not in rec


def test_summary_and_markdown_count_cases_per_variant():
    backend = NumpyBackend()
    records = [_named(f"dynamic_quant/{k}", backend) for k in
               ("variant_rows4_h4096_single_row", "variant_rows384_h4096_single_row", "variant_rows385_h4096_multi_row")]
    summary = build_summary(records)
    assert summary["variants"] == {"dynamic_quant": {"dynamic_quant/multi-row[10]": 1,
                                                     "dynamic_quant/single-row[100]": 2}}
    md = markdown.render(summary, {})
    assert "## Kernel variants exercised" in md and "| `dynamic_quant` | `dynamic_quant/single-row[100]` | 2 |" in md
