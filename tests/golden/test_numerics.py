"""The ``Numerics`` record (w8a8/numerics.py): Ascend defaults, validation, (de)serialisation.

The defaults are the Ascend A2/A3 kernel behaviour of their sources; each assertion below
names the source that fixes it, so a change of default is a deliberate, visible act.
"""

import dataclasses

import pytest

from w8a8 import ASCEND, Numerics


def test_ascend_defaults_follow_the_spec():
    n = Numerics()
    assert n == ASCEND
    assert n.name == "ascend-a2a3"
    assert n.round_mode == "half_even"              # CAST_RINT, dynamic_quant.h, ascend_quant_v2.h
    assert n.quant_codes == "mul_inv"               # inv = 127/amax multiplied, dynamic_quant.h
    assert n.scale_out == "reciprocal"              # scale = 1/inv on the main path, dynamic_quant.h
    assert n.zero_row == "zero"                     # NaN integer not confirmed: golden writes 0
    assert n.nan_policy == "raise"                  # NaN/Inf behaviour unspecified by the sources
    assert n.saturate is True                       # hardware conversion saturates (ascend_quant_v2.h)
    assert n.fp19_scale == "adapter"                # adapter packs fp32 scale for fp16/int8 out (QuantMatmulKernelNpuOpApi.cpp)
    assert n.fp19_round_mode == 0                   # npu_trans_quant_param default truncates (trans_quant_param_v2.h)
    assert n.int32_bias == "accumulator"            # mm.SetBias on the int32 accumulator (qbmm v3)
    assert n.epilogue_order == "scale_then_token"   # dequant first, then pertoken (qbmm v3)
    assert n.requant_clamp9 is True                 # the CANN golden's s9 steps (qbmmv3_kernel_golden.py)
    # torch quantize_per_channel on x86 (torch 2.13, measured: test_quantize.py) computes
    # rint(zp + x * fp32(1/s)): zero point before rounding, reciprocal multiply (torch.quantize_per_channel)
    assert n.zero_point_position == "before_rounding"
    assert n.quantize_div == "mul_rcp"
    # the record's values of the fields that kernel variants decide (the "fixed" behaviour)
    assert (n.swiglu_order, n.antiquant_precision, n.finalize_precision, n.finalize_out_round,
            n.dropped_slot_bias, n.gating_precision, n.static_zero_scale) == (
        "a_div", "fp32", "fp32", "half_even", "apply", "fp32", "as_one")
    assert n.platform == "ascend910_93" and n.variants == "select"   # A3 (910C), variants selected


def test_choices_list_the_default_first():
    defaults = ASCEND.as_dict()
    for field, allowed in Numerics.choices().items():
        assert defaults[field] == allowed[0], field


@pytest.mark.parametrize("field, bad", [
    ("round_mode", "half_up"),
    ("quant_codes", "reciprocal"),
    ("scale_out", "amax"),
    ("zero_row", "nan"),
    ("nan_policy", "ignore"),
    ("saturate", 1),            # an int is not a bool: the record is strict about types
    ("fp19_round_mode", True),  # a bool is not 0/1 either (type(True) is bool, not int)
    ("fp19_round_mode", 2),
    ("epilogue_order", "token_first"),
    ("zero_point_position", "middle"),
])
def test_invalid_field_names_the_field(field, bad):
    with pytest.raises(ValueError) as exc:
        Numerics(**{field: bad})
    assert f"'{field}'" in str(exc.value)


def test_record_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ASCEND.round_mode = "half_away"


def test_replace_names_the_change_and_differences_lists_it():
    n = ASCEND.replace(round_mode="half_away", zero_row="int_min")
    assert n.round_mode == "half_away" and n.zero_row == "int_min"
    assert n.name == "ascend-a2a3+round_mode=half_away,zero_row=int_min"
    assert ASCEND.differences(n) == {"round_mode": ("half_even", "half_away"),
                                     "zero_row": ("zero", "int_min")}
    assert ASCEND.differences(ASCEND) == {}
    # an explicit name is kept; the name is not an arithmetic field
    m = ASCEND.replace(name="mine")
    assert m.name == "mine" and ASCEND.differences(m) == {}
    with pytest.raises(ValueError, match="'saturate'"):
        ASCEND.replace(saturate="yes")


def test_dict_round_trip_and_unknown_fields():
    n = ASCEND.replace(quant_codes="div_scale", scale_out="amax_div")
    assert Numerics.from_dict(n.as_dict()) == n
    with pytest.raises(ValueError, match="unknown fields"):
        Numerics.from_dict({**n.as_dict(), "rounding": "x"})
