"""backends.base: ops implemented by registration and the one prepare mechanism (docs/architecture.md).

Small backends written here record what the base class calls, in which order: the golden's check
before the loader, the loader (and its transfers) at prepare, the implementation and synchronize in
``run``, the conversion back in ``finish``; and the refusals before any of it (unknown op,
unimplemented op, unavailable backend, another numerics record).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import w8a8
from backends import Backend, Unsupported, implements, loads
from backends.numpy_backend import NumpyBackend
from w8a8.dynamic_quant import DynamicQuantArgs

X1, X2, SCALE = np.ones((2, 8), np.int8), np.ones((8, 3), np.int8), np.full(3, 0.5, np.float32)


class Recording(Backend):
    """Implements quant_matmul (with a loader) and both dynamic quantizers (without: the default transfer)."""

    name = "recording"

    def __init__(self, transfer_delay: float = 0.0):
        self.events: list[str] = []
        self.delay = transfer_delay

    def to_device(self, array):
        self.events.append("to_device")
        time.sleep(self.delay)
        return array.copy()   # a "device" copy: the implementation never sees the caller's array

    def from_device(self, value):
        self.events.append("from_device")
        return value

    def synchronize(self):
        self.events.append("synchronize")

    @loads("quant_matmul")
    def _load_quant_matmul(self, a):
        self.events.append("load")
        return self.transfer((a.x1, a.x2, a.scale)), a.out

    @implements("quant_matmul")
    def _quant_matmul(self, loaded):
        self.events.append("run")
        (x1, x2, scale), out = loaded
        return w8a8.quant_matmul(x1, x2, scale, output_dtype=out)

    @implements("dynamic_quant", "dynamic_quant_asymmetric")
    def _dynamic(self, a, *, op):
        self.events.append(op)
        return getattr(w8a8, op)(a.x, smooth_scales=a.smooth_scales, group_index=a.group_index, dst_type=a.dst)


def test_ops_are_what_is_registered_in_registry_order():
    assert Recording().ops() == ("dynamic_quant", "dynamic_quant_asymmetric", "quant_matmul")
    assert Recording().supports("quant_matmul") and not Recording().supports("swiglu")


def test_prepare_checks_loads_then_run_computes_and_synchronizes_then_finish_converts_back():
    b = Recording(transfer_delay=0.01)
    prepared = b.prepare("quant_matmul", X1, X2, SCALE, output_dtype="bfloat16")
    assert b.events == ["load", "to_device", "to_device", "to_device"]   # the loader at prepare, untimed
    assert prepared.transfer_in_s >= 0.03 and prepared.load_s >= 0     # three sleeps inside transfer()
    b.events.clear()
    out = prepared.run()
    assert b.events == ["run", "synchronize"]
    b.events.clear()
    y = prepared.finish(out)
    assert b.events == ["from_device"]
    np.testing.assert_array_equal(y.view(np.int16), w8a8.quant_matmul(X1, X2, SCALE, output_dtype="bfloat16")
                                  .view(np.int16))
    np.testing.assert_array_equal(prepared().view(np.int16), y.view(np.int16))   # re-runnable


def test_a_bad_call_raises_the_goldens_error_before_anything_else():
    b = Recording()
    bad = np.ones((2, 8), np.float16)
    with pytest.raises(TypeError) as golden:
        w8a8.quant_matmul(bad, X2, SCALE)
    with pytest.raises(TypeError) as backend:
        b.quant_matmul(bad, X2, SCALE)
    assert str(backend.value) == str(golden.value) and b.events == []
    with pytest.raises(TypeError) as golden:   # a call that does not fit the signature: the op's own message
        w8a8.quant_matmul(X1, X2, SCALE, no_such_argument=1)
    with pytest.raises(TypeError) as backend:
        b.quant_matmul(X1, X2, SCALE, no_such_argument=1)
    assert str(backend.value) == str(golden.value) and "quant_matmul()" in str(golden.value)


def test_without_a_loader_the_implementation_gets_the_args_on_the_device():
    b = Recording()
    x = np.linspace(-1, 1, 32, dtype=np.float32).astype(np.float16).reshape(2, 16)
    seen = {}

    class Spy(Recording):
        @implements("dynamic_quant")
        def _dynamic(self, a, *, op):
            seen["a"] = a
            return super()._dynamic(a, op=op)

    y, s = Spy().dynamic_quant(x)
    assert isinstance(seen["a"], DynamicQuantArgs) and seen["a"].x is not x     # transferred (copied)
    np.testing.assert_array_equal(seen["a"].x, x)
    want = w8a8.dynamic_quant(x)
    np.testing.assert_array_equal(y, want[0])
    np.testing.assert_array_equal(s, want[1])
    b.dynamic_quant_asymmetric(x)   # one method for two ops: op= names the one called
    assert b.events == ["to_device", "dynamic_quant_asymmetric", "synchronize"] + ["from_device"] * 3


def test_unknown_unimplemented_and_unavailable_are_unsupported_before_the_check():
    b = Recording()
    with pytest.raises(Unsupported, match="does not implement op 'quant_matmull'"):
        b.call("quant_matmull", X1)
    with pytest.raises(Unsupported, match="does not implement op 'swiglu'"):
        b.swiglu("not even an array")

    class Away(Recording):
        def available(self):
            return False, "the device is in another room"

    with pytest.raises(Unsupported, match="not available: the device is in another room"):
        Away().quant_matmul("not even an array", X2, SCALE)
    assert b.events == []


def test_one_numerics_refusal_for_every_backend():
    b = Recording()
    b.quant_matmul(X1, X2, SCALE, output_dtype="bfloat16", numerics=w8a8.ASCEND)   # the declared record: fine
    with pytest.raises(Unsupported, match=f"implements numerics '{w8a8.ASCEND.name}' only; got .*round_mode"):
        b.quant_matmul(X1, X2, SCALE, numerics=w8a8.ASCEND.replace(round_mode="half_away"))
    with pytest.raises(TypeError, match="'numerics' must be a w8a8.Numerics"):
        b.quant_matmul(X1, X2, SCALE, numerics="ascend")

    class Flexible(Recording):
        """Accepts any record; the implementation and the golden's check get the one asked for."""

        def accepts_numerics(self, numerics):
            return True

        @implements("dynamic_quant")
        def _dynamic(self, a, *, op, numerics):
            self.events.append(numerics.scale_out)
            return w8a8.dynamic_quant(a.x, numerics=numerics)

    other = w8a8.ASCEND.replace(scale_out="amax_div", nan_policy="ieee")
    x = np.array([[1.0, np.nan, 3.0, 4.0]], np.float16)
    f = Flexible()
    f.dynamic_quant(x, numerics=other)          # NaN passes the check under nan_policy="ieee"
    assert "amax_div" in f.events
    with pytest.raises(ValueError, match="'x' must be finite"):
        f.dynamic_quant(x)                       # the declared record: nan_policy="raise"


def test_registration_mistakes_fail_when_the_class_is_created():
    with pytest.raises(TypeError, match="@implements\\('quant_matmull'\\): no golden op 'quant_matmull'"):
        class Typo(Backend):
            @implements("quant_matmull")
            def _qmm(self, a):
                return None
    with pytest.raises(TypeError, match="two methods @implements\\('swiglu'\\): _one and _two"):
        class Twice(Backend):
            @implements("swiglu")
            def _one(self, a):
                return None

            @implements("swiglu")
            def _two(self, a):
                return None
    with pytest.raises(TypeError, match="@loads without @implements for swiglu"):
        class LoaderOnly(Backend):
            @loads("swiglu")
            def _load_swiglu(self, a):
                return a
    with pytest.raises(TypeError, match="must not be named like the public op method 'swiglu'"):
        class Shadow(Backend):
            @implements("swiglu")
            def swiglu(self, a):
                return None
    with pytest.raises(TypeError, match="the op names, as strings"):
        implements()


def test_a_helper_named_like_the_base_classs_private_machinery_fails_when_the_class_is_created():
    # a helper called _load would replace Backend._load (the loader step of every prepare): refused, naming both
    with pytest.raises(TypeError, match=r"\.Helper\._load shadows backends\.Backend\._load, the base class's own "
                                        r"machinery; rename it"):
        class Helper(Backend):
            @implements("swiglu")
            def _swiglu(self, a):
                return self._load(a)

            def _load(self, a):
                return a
    with pytest.raises(TypeError, match=r"Backend\._convert_out"):
        class Converter(Backend):
            def _convert_out(self, value):
                return value

    class DeviceArrays(Backend):                  # the one private hook a backend may override
        def _is_device_array(self, value):
            return False

    assert DeviceArrays()._is_device_array(np.zeros(1)) is False


def test_a_subclass_overrides_by_name_or_by_registration():
    class Renamed(Recording):
        def _quant_matmul(self, loaded):          # same name: called instead, no decorator needed
            self.events.append("override")
            return super()._quant_matmul(loaded)

    class Reregistered(Recording):
        @implements("quant_matmul")
        def _other(self, loaded):                 # the most derived registration wins
            self.events.append("other")
            return super()._quant_matmul(loaded)

    for cls, event in ((Renamed, "override"), (Reregistered, "other")):
        b = cls()
        b.quant_matmul(X1, X2, SCALE, output_dtype="bfloat16")
        assert event in b.events


def test_the_numpy_backend_is_every_op_and_lets_the_golden_check_once():
    b = NumpyBackend()
    assert b.ops() == w8a8.registry.names()
    prepared = b.prepare("quant_matmul", np.ones((2, 8), np.float16), X2, SCALE)   # not checked twice: at run
    with pytest.raises(TypeError, match="quant_matmul: argument 'x1'"):
        prepared()
    other = w8a8.ASCEND.replace(round_mode="half_away")
    x = np.array([[0.5, 1.5, 2.5, 127.0]], np.float16)
    np.testing.assert_array_equal(b.dynamic_quant(x, numerics=other)[0], w8a8.dynamic_quant(x, numerics=other)[0])
    assert b.format_cast_nz(np.ones((3, 5), np.int8), numerics=other).shape == (1, 1, 16, 32)  # no numerics: dropped
