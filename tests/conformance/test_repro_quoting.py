"""A repro line is one shell command line: shlex splits it back into exactly the arguments it was made
from, whatever they hold (a backend file path with a space, a JSON string with a single quote)."""

import shlex

from conformance.evaluate import repro_command


def test_a_backend_spec_with_a_space_and_a_quote_in_the_case_survive_the_shell():
    params = {"named": "dynamic_quant/it's", "shape": [1, 7]}
    line = repro_command("/tmp/my kernels/k.py:Mine", "dynamic_quant", params)
    argv = shlex.split(line)
    assert argv[:5] == ["w8a8", "conformance", "--backend", "/tmp/my kernels/k.py:Mine", "--op"]
    assert argv[5:7] == ["dynamic_quant", "--case"] and argv[7] == '{"named":"dynamic_quant/it\'s","shape":[1,7]}'


def test_a_plain_repro_line_reads_as_before():
    line = repro_command("conformance.planted:TiesAwayBackend", "dynamic_quant", {"named": "dynamic_quant/x"})
    assert line == ("w8a8 conformance --backend conformance.planted:TiesAwayBackend --op dynamic_quant "
                    "--case '{\"named\":\"dynamic_quant/x\"}'")
