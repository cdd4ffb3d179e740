"""flash-linear-attention (FLA) on its own benchmark shapes, for attnkit's linear side-by-side run.

For each shape (ANCHORS.md: B, T, H, D with K = V = D) it draws FLA's benchmark inputs in its
token-major layout [B, T, H, D]: bf16 randn q, k, v with q and k L2-normalised, g = logsigmoid(randn)
and beta = sigmoid(randn) in float32 (beta rounded to bf16 values, so FLA's bf16 beta and attnkit's
float32 beta hold the same numbers), and an output gradient. It saves them with FLA's outputs and
final states to <out>/<shape>.safetensors, and times (triton.testing.do_bench medians, after one
untimed call that absorbs FLA's autotuning):
  - chunk_gated_delta_rule and chunk_delta_rule: forward, and forward + backward where FLA runs it
    (on Hopper with Triton 3.4 to 3.7 FLA refuses the gated backward: recorded as an error);
  - fused_recurrent_gated_delta_rule decode: one token for each of B packed sequences with an fp32
    state [B, H, K, V] (saved to <out>/decode_<shape>.safetensors with FLA's output and the first
    rows of its new state).
Timings go to <out>/fla_timings.json. With --skip-fla it only makes and saves the inputs.

Run by bench/linear_side_by_side.ts (through Deno.Command) on the GPU machine, with FLA's source at
./fla (PYTHONPATH=.):
    python3 bench/fla_linear.py --out /tmp/attnkit_fla --ops gdn,delta,decode
"""

import argparse
import inspect
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing
from safetensors.torch import save_file

sys.path.insert(0, os.getcwd())

SHAPES = [
    (1, 8192, 96, 128),
    (2, 16384, 16, 128),
    (4, 2048, 16, 128),
    (4, 4096, 64, 128),
    (8, 2048, 32, 256),
    (8, 1024, 8, 64),
]
DECODE_SHAPES = [(256, 32, 128)]  # B sequences, H heads, K = V


def wanted(only, name):
    """True when no filter is given or the name contains one of the comma-separated parts."""
    parts = [p for p in only.split(",") if p]
    return not parts or any(p in name for p in parts)


def shape_name(b, t, h, d):
    return f"B{b}_T{t}_H{h}_D{d}"


def bench(fn, warmup, rep, grad_to_none=None):
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none, return_mode="median")


def call(fn, **kwargs):
    """Calls an FLA op with the keyword arguments its signature has (versions differ)."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def fla_ops():
    from fla.ops.delta_rule import chunk_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    return chunk_gated_delta_rule, chunk_delta_rule, fused_recurrent_gated_delta_rule


def make_inputs(b, t, h, d, seed, device):
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32, generator=gen)

    q = F.normalize(randn(b, t, h, d), dim=-1).to(torch.bfloat16)
    k = F.normalize(randn(b, t, h, d), dim=-1).to(torch.bfloat16)
    v = randn(b, t, h, d).to(torch.bfloat16)
    g = F.logsigmoid(randn(b, t, h))
    beta = torch.sigmoid(randn(b, t, h)).to(torch.bfloat16).float()
    do = randn(b, t, h, d).to(torch.bfloat16)
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "do": do}


def run_chunk(label, fn, x, gated, args, record, tensors):
    kw = dict(q=x["q"], k=x["k"], v=x["v"], beta=x["beta"].to(torch.bfloat16))
    if gated:
        kw["g"] = x["g"]
    t0 = time.time()
    o, ht = call(fn, **kw, output_final_state=True)  # untimed: FLA autotunes here
    torch.cuda.synchronize()
    record["first_call_s"] = round(time.time() - t0, 1)
    tensors[f"o_{label}"] = o.contiguous()
    tensors[f"ht_{label}"] = ht.float().contiguous()
    record["fwd_ms"] = bench(lambda: call(fn, **kw), args.warmup, args.rep)
    if args.no_fwdbwd:
        return
    try:
        leaves = {n: kw[n].detach().clone().requires_grad_() for n in kw}
        og, _ = call(fn, **leaves)
        og.backward(x["do"])  # untimed: autotuning of the backward kernels
        torch.cuda.synchronize()
        grads = list(leaves.values())

        def step():
            out, _ = call(fn, **leaves)
            out.backward(x["do"])

        record["fwdbwd_ms"] = bench(step, args.warmup, args.rep, grad_to_none=grads)
    except Exception as e:  # noqa: BLE001 - a refusal is recorded, not fatal
        record["fwdbwd_error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def run_decode(fn, b, h, d, seed, device, args, out_dir, timings):
    name = shape_name(b, 1, h, d)
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float32, generator=gen)

    q = F.normalize(randn(b, h, d), dim=-1).to(torch.bfloat16)
    k = F.normalize(randn(b, h, d), dim=-1).to(torch.bfloat16)
    v = randn(b, h, d).to(torch.bfloat16)
    g = F.logsigmoid(randn(b, h))
    beta = torch.sigmoid(randn(b, h)).to(torch.bfloat16).float()
    state = randn(b, h, d, d) * 0.1
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state}
    record = {"batch": b, "heads": h, "dim": d}
    if fn is not None:
        cu = torch.arange(b + 1, device=device, dtype=torch.int32)
        kw = dict(
            q=q[None], k=k[None], v=v[None], g=g[None], beta=beta[None].to(torch.bfloat16),
            initial_state=state, output_final_state=True, cu_seqlens=cu,
        )
        try:
            t0 = time.time()
            o, ht = call(fn, **kw)
            torch.cuda.synchronize()
            record["first_call_s"] = round(time.time() - t0, 1)
            tensors["o_fla"] = o[0].contiguous()
            tensors["ht_fla_head"] = ht[:4].float().contiguous()
            record["decode_ms"] = bench(lambda: call(fn, **kw), args.warmup, args.rep)
        except Exception as e:  # noqa: BLE001
            record["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
    save_file({n: t.contiguous() for n, t in tensors.items()}, os.path.join(out_dir, f"decode_{name}.safetensors"))
    timings["decode"][name] = record
    print(f"decode {name}: " + ", ".join(f"{k_}={v_}" for k_, v_ in record.items()), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="folder for the .safetensors files and fla_timings.json")
    parser.add_argument("--ops", default="gdn,delta,decode", help="comma list of gdn, delta, decode")
    parser.add_argument("--only", default="", help="run only shapes whose name contains one of these (comma-separated)")
    parser.add_argument("--skip-fla", action="store_true", help="only make and save the inputs")
    parser.add_argument("--no-fwdbwd", action="store_true", help="skip forward + backward timings")
    parser.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=float, default=100.0, help="do_bench repetition time, ms")
    args = parser.parse_args()
    ops = set(args.ops.split(","))
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    gdn = delta = recurrent = None
    fla_version = "skipped"
    if not args.skip_fla:
        gdn, delta, recurrent = fla_ops()
        try:
            import fla

            fla_version = getattr(fla, "__version__", "unknown")
        except Exception:  # noqa: BLE001
            fla_version = "unknown"
    timings = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla": fla_version,
        "shapes": {},
        "decode": {},
    }
    for i, (b, t, h, d) in enumerate(SHAPES):
        name = shape_name(b, t, h, d)
        if not wanted(args.only, name):
            continue
        if not ops & {"gdn", "delta"}:
            break
        x = make_inputs(b, t, h, d, 1000 + i, device)
        tensors = dict(x)
        entry = {"batch": b, "seq": t, "heads": h, "dim": d, "ops": {}}
        for label, fn, gated in (("gdn", gdn, True), ("delta", delta, False)):
            if label not in ops or fn is None:
                continue
            record = {}
            try:
                run_chunk(label, fn, x, gated, args, record, tensors)
            except Exception as e:  # noqa: BLE001 - FLA refusing a shape is recorded, not fatal
                record["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            entry["ops"][label] = record
            print(f"{name} {label}: " + ", ".join(f"{k_}={v_}" for k_, v_ in record.items()), flush=True)
        save_file({n: v.contiguous() for n, v in tensors.items()}, os.path.join(args.out, f"{name}.safetensors"))
        timings["shapes"][name] = entry
        del x, tensors
        torch.cuda.empty_cache()
    if "decode" in ops:
        for j, (b, h, d) in enumerate(DECODE_SHAPES):
            if not wanted(args.only, shape_name(b, 1, h, d)):
                continue
            run_decode(recurrent, b, h, d, 2000 + j, device, args, args.out, timings)
            torch.cuda.empty_cache()
    with open(os.path.join(args.out, "fla_timings.json"), "w") as f:
        json.dump(timings, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
