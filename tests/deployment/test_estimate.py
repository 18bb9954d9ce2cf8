"""``w8a8 estimate`` (deployment/estimate.py): the deployment calculator of the note
"超大 MoE 的低比特推理" (low-bit inference of very large MoE).

The five rows the note prints for "1T total, 32B active, H200 (141 GB, 4.8 TB/s), 30% reserve, 8-GPU
decode" are copied verbatim from the note's output and must come out exactly, as printed there
(2 decimals for TB and ms).
"""

import json
import math

import pytest
from hypothesis import given, strategies as st

from w8a8cli.main import main
from deployment.estimate import (DEVICES, FORMATS, Device, Format, estimate, get_device, model_from_config,
                                  model_from_counts)

# The note's output, one tuple per printed line: weights TB, devices, nodes, decode ms.
SEED_ROWS = {
    "BF16": ("2.00", 21, 3, "1.67"),
    "FP8": ("1.00", 11, 2, "0.83"),
    "INT4": ("0.56", 6, 1, "0.47"),
    "MXFP4": ("0.53", 6, 1, "0.44"),
    "NVFP4": ("0.56", 6, 1, "0.47"),
}


def test_seed_rows_json(capsys):
    assert main(["estimate", "--total", "1e12", "--active", "32e9", "--device", "h200", "--json"]) == 0
    rows = {r["format"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(SEED_ROWS) | {"INT8"}
    for fmt, (tb, devices, nodes, ms) in SEED_ROWS.items():
        r = rows[fmt]
        assert set(r) == {"format", "weight_bytes", "devices", "nodes", "decode_ms"}
        assert (f"{r['weight_bytes'] / 1e12:.2f}", r["devices"], r["nodes"], f"{r['decode_ms']:.2f}") == \
               (tb, devices, nodes, ms), fmt


def test_seed_rows_table(capsys):
    assert main(["estimate", "--total", "1e12", "--active", "32e9", "--device", "h200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for fmt, (tb, devices, nodes, ms) in SEED_ROWS.items():
        line = next(x for x in lines if x.strip("│ ").startswith(fmt + " "))
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert cells[2:] == [f"{tb} TB", str(devices), str(nodes), ms], line


def test_bytes_per_param():
    by = {f.name: f for f in FORMATS}
    # data bytes + scale bytes / elements per scale, as the note writes them
    assert by["BF16"].bytes_per_param() == 2.0
    assert by["FP8"].bytes_per_param() == 1 + 4 / 128**2
    assert by["INT8"].bytes_per_param(7168) == 1 + 4 / 7168
    assert by["INT4"].bytes_per_param() == 0.5 + 2 / 32
    assert by["MXFP4"].bytes_per_param() == 0.5 + 1 / 32
    assert by["NVFP4"].bytes_per_param() == 0.5 + 1 / 16


def test_exact_tensor_bytes_round_blocks_up():
    by = {f.name: f for f in FORMATS}
    # [129, 257]: FP8 needs ceil(129/128) * ceil(257/128) = 2 * 3 = 6 fp32 scales
    assert by["FP8"].tensor_bytes((129, 257)) == 129 * 257 + 6 * 4
    # INT4 groups of 32 along K: 257 -> 9 groups per row, bf16 scales
    assert by["INT4"].tensor_bytes((129, 257)) == 129 * 257 / 2 + 129 * 9 * 2
    # NVFP4: 17 groups of 16 per row, E4M3 scales, plus one fp32 per tensor
    assert by["NVFP4"].tensor_bytes((3, 257)) == 3 * 257 / 2 + 3 * 17 + 4
    # per-channel: one fp32 per row; a 1-D tensor is one row; stacked experts [E, N, K]
    assert by["INT8"].tensor_bytes((5, 64)) == 5 * 64 + 5 * 4
    assert by["INT8"].tensor_bytes((64,)) == 64 + 4
    assert by["INT8"].tensor_bytes((8, 5, 64)) == 8 * (5 * 64 + 5 * 4)
    assert by["BF16"].tensor_bytes((3, 4)) == 24


def test_config_mode_deepseek_v3(tmp_path):
    m = model_from_config("deepseek-v3")
    assert 668e9 < m.total < 674e9 and 36e9 < m.active < 38e9       # published: 671B / 37B
    rows = {r.format: r for r in estimate(m, get_device("h200"))}
    # aligned DeepSeek shapes: the exact count equals the nominal bytes per parameter, except for
    # the few dimensions that are not multiples of the block (FP8 / per-channel overheads are tiny)
    assert rows["BF16"].weight_bytes == 2 * m.total
    assert abs(rows["INT4"].weight_bytes / m.total - 0.5625) < 1e-4
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "deepseek_v3", **model_config_v3()}))
    assert model_from_config(str(path)).total == m.total


def model_config_v3():
    from checkpoints.models import PRESETS
    return {k: v for k, v in PRESETS["deepseek-v3"].items() if k != "model_type"}


def test_config_mode_deepseek_v4_flash():
    m = model_from_config("deepseek-v4-flash")
    assert 283e9 < m.total < 285.5e9 and 12.5e9 < m.active < 13.5e9   # published: 284B / 13B
    with_mtp = model_from_config("deepseek-v4-flash", include_mtp=True)
    assert with_mtp.total > m.total


def test_devices():
    assert (DEVICES["h200"].memory, DEVICES["h200"].bandwidth) == (141e9, 4.8e12)
    assert get_device("Ascend 910C").name == "Ascend 910C"
    custom = get_device(memory_gb=64, bandwidth_tbs=1.6)
    assert (custom.memory, custom.bandwidth, custom.name) == (64e9, 1.6e12, "custom")
    over = get_device("h100", memory_gb=94)
    assert (over.memory, over.bandwidth) == (94e9, 3.35e12) and "custom" in over.name


def test_guarded_ceiling():
    # 12 devices' worth exactly: binary rounding must not turn 12.000...01 into 13
    dev = Device("x", 100e9, 1e12)
    m = model_from_counts(6 * 70e9, 1e9)        # bf16: 2 bytes/param -> 840 GB = 12 x 70 GB usable
    (row,) = estimate(m, dev, formats=["BF16"])
    assert row.devices == 12 and row.nodes == 2
    m = model_from_counts(6 * 70e9 + 10, 1e9)   # ten parameters more need one more device
    assert estimate(m, dev, formats=["BF16"])[0].devices == 13


@given(total=st.floats(1e6, 1e13), frac=st.floats(0.001, 1.0), reserve=st.floats(0, 0.95),
       parallel=st.integers(1, 64))
def test_properties(total, frac, reserve, parallel):
    m = model_from_counts(total, total * frac)
    dev = DEVICES["b200"]
    rows = estimate(m, dev, reserve=reserve, parallel=parallel)
    for r in rows:
        usable = dev.memory * (1 - reserve)
        assert (r.devices - 1) * usable < r.weight_bytes * (1 + 1e-9) and r.weight_bytes <= r.devices * usable * (1 + 1e-9)
        assert r.nodes == math.ceil(r.devices / 8)
        assert math.isclose(r.decode_ms, r.active_bytes / (parallel * dev.bandwidth) * 1e3)
    # fewer bytes per parameter never needs more devices
    by = {r.format: r for r in rows}
    assert by["MXFP4"].devices <= by["INT4"].devices <= by["FP8"].devices <= by["BF16"].devices


@pytest.mark.parametrize("argv,needle", [
    (["--total", "1e12"], "give --total and --active"),
    (["--total", "1e12", "--active", "2e12"], "'active'"),
    (["--total", "-1", "--active", "1"], "'total'"),
    (["--total", "1e12", "--active", "1e9", "--device", "tpu9"], "'device' must be one of"),
    (["--total", "1e12", "--active", "1e9", "--reserve", "1"], "'reserve'"),
    (["--total", "1e12", "--active", "1e9", "--parallel", "0"], "'parallel'"),
    (["--total", "1e12", "--active", "1e9", "--formats", "FP3"], "unknown format 'FP3'"),
    (["--total", "1e12", "--active", "1e9", "--memory", "80"], "'bandwidth'"),
    (["--total", "1e12", "--active", "1e9", "--memory", "0", "--bandwidth", "1"], "'memory'"),
    (["--config", "deepseek-v3", "--total", "1e12"], "either --config or --total"),
    (["--config", "/nonexistent/config.json"], "cannot read"),
    (["--total", "1e12", "--active", "1e9", "--include-mtp"], "needs --config"),
])
def test_bad_arguments(argv, needle, capsys):
    assert main(["estimate", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_bad_config_content(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "deepseek_v3", **model_config_v3(), "num_experts_per_tok": 0}))
    assert main(["estimate", "--config", str(path)]) == 2
    assert "num_experts_per_tok" in capsys.readouterr().err
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="cannot tell the architecture"):
        model_from_config(str(path))


def test_format_subset_and_custom_device(capsys):
    assert main(["estimate", "--total", "1e12", "--active", "32e9", "--memory", "141", "--bandwidth", "4.8",
                 "--formats", "mxfp4,bf16", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["format"] for r in rows] == ["MXFP4", "BF16"] and rows[1]["devices"] == 21


def test_format_dataclass_nominal_without_block():
    assert Format("X", "x", 1.5).tensor_bytes((2, 2)) == 6.0
