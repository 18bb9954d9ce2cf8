"""``--prompts`` with only ``vocab.json`` + ``merges.txt`` (a Qwen2/GPT-2 slow tokenizer): built as a byte-level
BPE with the ``tokenizers`` library, encoding as transformers' own slow tokenizers do.

The expected ids come from transformers 4.51.0's ``Qwen2Tokenizer`` and ``GPT2Tokenizer`` on the same files
(``tests/checkpoints/make_fp16_static.py`` wrote them, in msModelSlim's environment): an encoder this project
did not write. The texts hold digits ("3.14159"), which Qwen2 splits one by one and GPT-2 does not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from modelrun.analysis import encode_prompts

D = Path(__file__).resolve().parents[1] / "checkpoints" / "data" / "fp16-static"
EXPECTED = json.loads((D / "prompt_ids.json").read_text())


def test_the_fixture_has_no_tokenizer_json():
    assert not (D / "float" / "tokenizer.json").exists() and (D / "float" / "merges.txt").is_file()


def test_qwen2_slow_files_encode_as_transformers_qwen2_tokenizer():
    assert encode_prompts(D / "float", EXPECTED["texts"]) == EXPECTED["Qwen2Tokenizer"]


def test_gpt2_slow_files_encode_as_transformers_gpt2_tokenizer(tmp_path):
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(D / "float" / f, tmp_path / f)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    assert encode_prompts(tmp_path, EXPECTED["texts"]) == EXPECTED["GPT2Tokenizer"]
    assert EXPECTED["GPT2Tokenizer"] != EXPECTED["Qwen2Tokenizer"]      # the two families really differ here


def test_no_tokenizer_files_names_both_forms(tmp_path):
    with pytest.raises(ValueError, match=r"no tokenizer.json, nor vocab.json \+ merges.txt"):
        encode_prompts(tmp_path, ["hello"])


def test_inspect_prompt_limit_names_a_flag_inspect_has(tmp_path, capsys):
    import w8a8cli.main as cli

    long = tmp_path / "long.txt"
    long.write_text(("The quick brown fox jumps over the lazy dog. " * 40 + "\n") * 2)
    rc = cli.main(["inspect", str(D / "w8a8"), "--verify", "--reference", str(D / "float"), "--prompts", str(long)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--max-tokens" not in err and "--prompts" in err and "512" in err
