"""The expert-parallel MoE layer in R real processes (torch-dist, gloo on 127.0.0.1): wire bytes per token of
the INT8 and the BF16 dispatch and the time of each phase, at DeepSeek-V4-Flash shapes.

DeepSeek-V4-Flash: H = 4096, moe_intermediate I = 2048, top-6 of 256 routed experts. The routed experts are
reduced (``--experts``, default 32: 0.8 GB of int8 weights instead of 6.4 GB, each loaded once more in the
rank processes) and the tokens per rank are a decode-to-small-prefill batch (``--tokens``); the wire bytes
per token do not depend on either. Routing is a uniformly random top-6 (distinct experts per token), the
routing weights random fp32.

Per configuration (R, dispatch):

* **wire bytes per token**, from the counts each rank sent (:func:`backends.torch_dist.exchange.wire_bytes`):
  the dispatch's payload (int8: H bytes per copy; bf16: 2H) and scales (int8: 4 bytes per copy), split
  into what went to other ranks (``remote``, over the loopback here, the network on a cluster) and to the
  rank itself; the (t, k) metadata (8 bytes per copy) and the combine's return trip (bf16 rows, 2H per
  copy) apart. Divided by the tokens of all ranks.
* **time per phase**, the rank processes synchronised by a barrier around each phase
  (``TorchDistBackend.time_phases``), the slowest rank's: ``dispatch`` (the sender's quantization and the
  four all_to_all_single: counts, (t, k), scales, payload; then the receiver's sort), ``experts`` (the
  on-arrival quantization of the bf16 path, GMM1, SwiGLU + requant, GMM2 on the rank's experts),
  ``combine`` (the return all_to_all, the scatter and the fp32 weighted sum); and the whole call as the
  parent sees it (``call``: the phases plus the payloads pickled to the ranks and the outputs back).
  Median over the timed rounds.
* for reference, torch-cpu's single-process ``w8a8_moe_prequantized`` on the same tokens (the experts and
  the combine's work without an exchange; ``--no-baseline`` skips it).
* the output, **bit-identical to the golden** ``w8a8_moe_ep`` on the same inputs (checked once per
  configuration unless ``--no-verify``; the golden takes ~10-60 s per configuration here).

Run::

    python -m bench.ep                                   # R = 2, 4; int8 and bf16; E = 32, 64 tokens per rank
    python -m bench.ep --ranks 2 4 --tokens 128 --experts 32 --rounds 5 --json ep.json

The rank processes run one torch thread each (``cpu_count // R``, at least 1); with R = 4 on a 2-core
machine they share the cores, and the times say so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

H, I, TOP_K = 4096, 2048, 6
PHASES = ("dispatch", "experts", "combine")


def layer_inputs(ranks: int, tokens: int, experts: int, *, h: int = H, inter: int = I, k: int = TOP_K,
                 seed: int = 0) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of ``w8a8_moe_ep``: ``ranks`` ranks of ``tokens`` bf16 tokens, ``experts`` routed
    experts of DSV4's shape (checkpoint layout), a random distinct top-``k`` per token, fp32 weights."""
    from w8a8 import dtypes as _dt

    rng = np.random.default_rng(seed)
    w13 = rng.integers(-127, 128, (experts, 2 * inter, h), dtype=np.int8)
    w2 = rng.integers(-127, 128, (experts, h, inter), dtype=np.int8)
    s13 = rng.uniform(1e-4, 1e-3, (experts, 2 * inter, 1)).astype(np.float32)
    s2 = rng.uniform(1e-4, 1e-3, (experts, h, 1)).astype(np.float32)
    hidden = [rng.standard_normal((tokens, h), dtype=np.float32).astype(_dt.bfloat16) for _ in range(ranks)]
    ids = [np.argsort(rng.random((tokens, experts)), axis=1)[:, :k].astype(np.int32) for _ in range(ranks)]
    weights = [rng.uniform(0.05, 1.0, (tokens, k)).astype(np.float32) for _ in range(ranks)]
    return (hidden, w13, s13, w2, s2), {"topk_ids": ids, "topk_weights": weights}


def wire_per_token(phases: list, tokens: int, h: int, k: int) -> dict:
    """Bytes per token (all ranks' tokens) from the ranks' ``wire`` reports of one run."""
    total = {}
    for rank in phases:
        for name, value in rank["wire"].items():
            total[name] = total.get(name, 0) + value
    per = {name: value / tokens for name, value in total.items()}
    copies = total["remote_copies"] + total["local_copies"]
    per["dispatch_remote"] = per["remote_payload"] + per["remote_scales"]
    per["dispatch_all"] = per["dispatch_remote"] + per["local_payload"] + per["local_scales"]
    per["combine_all"] = copies * h * 2 / tokens
    per["combine_remote"] = total["remote_copies"] * h * 2 / tokens
    per["copies"] = copies / tokens
    per["remote_fraction"] = total["remote_copies"] / copies if copies else 0.0
    return per


def measure(backend, ranks: int, dispatch: str, *, tokens: int, experts: int, rounds: int, verify: bool,
            seed: int = 0) -> dict:
    """One configuration: load (untimed), warm up, ``rounds`` timed runs; the record of :func:`main`."""
    import w8a8

    args, kwargs = layer_inputs(ranks, tokens, experts, seed=seed)
    kwargs["dispatch"] = dispatch
    t0 = time.perf_counter()
    prepared = backend.prepare("w8a8_moe_ep", *args, **kwargs)
    load_s = time.perf_counter() - t0
    backend.time_phases = True
    try:
        out = prepared.finish(prepared.run())      # warm-up (and the output that is verified)
        calls, phases = [], {p: [] for p in PHASES}
        for _ in range(rounds):
            t0 = time.perf_counter()
            prepared.run()
            calls.append(time.perf_counter() - t0)
            for p in PHASES:
                phases[p].append(max(r["seconds"][p] for r in backend.last_phases))
        wire = wire_per_token(backend.last_phases, ranks * tokens, H, TOP_K)
    finally:
        backend.time_phases = False
    record = {"ranks": ranks, "dispatch": dispatch, "tokens_per_rank": tokens, "experts": experts, "h": H,
              "moe_intermediate": I, "top_k": TOP_K, "rounds": rounds, "load_s": load_s,
              "call_s": statistics.median(calls), "phases_s": {p: statistics.median(v) for p, v in phases.items()},
              "wire_bytes_per_token": wire, "verified": None}
    if verify:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, user_api="blas"):
            t0 = time.perf_counter()
            want = w8a8.w8a8_moe_ep(*args, **kwargs)
            record["golden_s"] = time.perf_counter() - t0
        record["verified"] = all(w.dtype == g.dtype and w.tobytes() == g.tobytes() for w, g in zip(want, out))
    return record


def single_process(ranks: int, tokens: int, experts: int, *, rounds: int, seed: int = 0) -> float:
    """Median seconds of torch-cpu's single-process ``w8a8_moe_prequantized`` (all threads, every expert)
    on the same tokens, routing and weights as :func:`measure`'s, already quantized with the MC2 sender's
    formula: the work of the EP call's experts and combine, without an exchange. A reference for the
    EP phase times, not the same numerics (its finalize takes bf16 weights)."""
    import backends
    import w8a8

    (hidden, w13, s13, w2, s2), kw = layer_inputs(ranks, tokens, experts, seed=seed)
    h = np.concatenate(hidden)
    q, sc = w8a8.dynamic_quant(h, numerics=w8a8.ASCEND.replace(variants="fixed"))
    prepared = backends.get("torch-cpu").prepare("w8a8_moe_prequantized", q, sc, w13, s13, w2, s2,
                                                  topk_ids=np.concatenate(kw["topk_ids"]),
                                                  topk_weights=np.concatenate(kw["topk_weights"]))
    prepared.run()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        prepared.run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def table(records: list) -> str:
    """The Markdown table of :func:`main`'s records."""
    lines = ["| R | dispatch | dispatch bytes/token (payload + scale): all / to other ranks | combine bytes/token: "
             "all / to other ranks | dispatch | experts | combine | whole call | bit-identical to the golden |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    base = [r for r in records if "single_process_s" in r]
    for r in records:
        w, p = r["wire_bytes_per_token"], r["phases_s"]
        ok = {True: "yes", False: "**no**", None: "not checked"}[r["verified"]]
        lines.append(f"| {r['ranks']} | {r['dispatch']} | {w['dispatch_all']:,.0f} / {w['dispatch_remote']:,.0f} | "
                     f"{w['combine_all']:,.0f} / {w['combine_remote']:,.0f} | {p['dispatch'] * 1e3:.1f} ms | "
                     f"{p['experts'] * 1e3:.1f} ms | {p['combine'] * 1e3:.1f} ms | {r['call_s'] * 1e3:.1f} ms | {ok} |")
    seen = set()
    for r in base:
        if r["ranks"] not in seen:
            seen.add(r["ranks"])
            lines.append(f"\nSingle process, torch-cpu `w8a8_moe_prequantized` on the same {r['ranks']} x "
                         f"{r['tokens_per_rank']} tokens (all threads, all {r['experts']} experts, no exchange): "
                         f"{r['single_process_s'] * 1e3:.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="EP world sizes (default 2 4)")
    parser.add_argument("--dispatch", nargs="+", default=["int8", "bf16"], choices=("int8", "bf16"))
    parser.add_argument("--tokens", type=int, default=64, help="tokens per rank (default 64)")
    parser.add_argument("--experts", type=int, default=32, help="routed experts E (default 32; DSV4: 256)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per configuration (default 5)")
    parser.add_argument("--no-verify", action="store_true", help="skip the golden check")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip torch-cpu's single-process w8a8_moe_prequantized on the same tokens")
    parser.add_argument("--json", metavar="PATH", help="write the records as JSON")
    args = parser.parse_args(argv)
    import backends

    backend = backends.get("torch-dist")
    ok, why = backend.available()
    if not ok:
        print(f"python -m bench.ep: torch-dist is not available: {why}", file=sys.stderr)
        return 2
    if args.experts < TOP_K or args.tokens < 0 or args.rounds < 1 or min(args.ranks) < 1:
        print(f"python -m bench.ep: need --experts >= top-k = {TOP_K}, --tokens >= 0, --rounds >= 1, --ranks >= 1",
              file=sys.stderr)
        return 2
    records = []
    try:
        for ranks in args.ranks:
            if args.experts % ranks:
                print(f"python -m bench.ep: --experts {args.experts} is not a multiple of R = {ranks}",
                      file=sys.stderr)
                return 2
            for dispatch in args.dispatch:
                rec = measure(backend, ranks, dispatch, tokens=args.tokens, experts=args.experts, rounds=args.rounds,
                              verify=not args.no_verify)
                records.append(rec)
                print(f"R={ranks} {dispatch}: " + json.dumps({k: rec[k] for k in ("call_s", "phases_s", "verified")}),
                      file=sys.stderr, flush=True)
            if not args.no_baseline:
                base = single_process(ranks, args.tokens, args.experts, rounds=args.rounds)
                for rec in records[-len(args.dispatch):]:
                    rec["single_process_s"] = base
    finally:
        backend.close()
    print(f"Command: python -m bench.ep {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(table(records))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
    return 0 if all(r["verified"] is not False for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
