"""run.html says in words how a backend and the routing differ from the golden (it printed a raw Python dict)."""

import json
import re

from modelrun.report import render_html


def _run(backend_summary, routing):
    return {"checkpoint": "ckpt", "family": "qwen2", "model_dtype": "bfloat16", "reference": "float", "sequences": 1,
            "tokens": 4, "backend": "numpy", "logits": {"rel_l2": 0.04, "top1": 0.9, "k": 5, "topk": 0.95},
            "modules": [], "per_layer": [], "first_exceeding": None, "routing": routing,
            "backend_summary": backend_summary, "unavailable_backends": {"torchao": "not installed"}}


def test_a_differing_backend_and_routing_causes_are_sentences_not_dicts():
    differs = {"modules": 14, "bitwise_modules": 12, "elements": 7168, "equal": 7150, "max_ulp": 3,
               "errors": [], "bitwise": False}
    routing = [{"module": "model.layers.0.mlp.gate", "changed": 2, "tokens": 51, "agreement": 49 / 51,
                "causes": {"tie": 1, "score": 1, "other": 0}, "note": ""}]
    page = render_html(_run({"torch-cpu": differs}, routing))
    assert "<li>torch-cpu: 12/14 modules bitwise, 7150/7168 elements equal, max 3 ULP</li>" in page
    assert "2 of 51 tokens changed expert set (agreement 96.1%); causes: tie 1, score 1</li>" in page
    assert "<li>torchao: not available here (not installed)</li>" in page
    assert json.dumps(differs) not in page and not re.search(r"<li>[^<]*\{[^<]*</li>", page)


def test_a_golden_only_run_says_so():
    page = render_html(_run({}, []))
    assert "only the golden ran" not in page   # torchao was asked for and is listed as unavailable
    page = render_html({**_run({}, []), "unavailable_backends": {}})
    assert "only the golden ran" in page
