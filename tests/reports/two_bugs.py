"""Two planted bugs in one backend, for the browser test of the failure groups: ``dynamic_quant`` rounds .5
ties away from zero (``TiesAwayBackend``) and ``mx_quantize`` ignores ``scale_mode`` and always computes
FLOOR (``MxFloorOnlyBackend``). Two bugs: the report must show two failure groups."""

from conformance.planted import MxFloorOnlyBackend, TiesAwayBackend


class TwoBugsBackend(TiesAwayBackend, MxFloorOnlyBackend):
    name = "planted-two-bugs"
    bug = "rounds .5 ties away from zero (dynamic_quant); always FLOOR whatever scale_mode (mx_quantize)"
