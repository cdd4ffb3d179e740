"""flash-linear-attention (FLA) times for the gated linear family side by side (bench/gla_side_by_side.ts).

For each shape (ANCHORS.md: B, T, H, D with K = V = D) it draws bf16 randn q, k, v and an output gradient
in FLA's token-major layout [B, T, H, D], GLA's gate as logsigmoid(randn) in float32 clamped at -5 (as
gla_side_by_side.ts draws it), and times with triton.testing.do_bench medians after one untimed call
that absorbs FLA's autotuning:
  - gla: chunk_gla, forward and forward + backward;
  - linear: chunk_linear_attn (normalize=False), forward and forward + backward;
  - linear_normalized: chunk_linear_attn (normalize=True, its default), forward and forward + backward;
  - feature: elu(x) + 1 applied to q and k in PyTorch, then chunk_linear_attn (normalize=True), the
    feature map's own time included, forward and forward + backward.
Timings are written to <out>/fla_gla_timings.json after every op, so a run cut short keeps what it
measured. Run on the GPU machine with FLA's source at ./fla (PYTHONPATH=.):
    python3 bench/fla_gla.py --out $OUT --ops gla,linear,feature --only B8_T1024
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, os.getcwd())

SHAPES = [
    (1, 8192, 96, 128),
    (2, 16384, 16, 128),
    (4, 2048, 16, 128),
    (4, 4096, 64, 128),
    (8, 2048, 32, 256),
    (8, 1024, 8, 64),
]


def wanted(only, name):
    parts = [p for p in only.split(",") if p]
    return not parts or any(p in name for p in parts)


def bench(fn, args, grads=None):
    return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, grad_to_none=grads, return_mode="median")


def time_op(fn, leaves, do, args, record):
    """Times fn(*leaves) forward, then forward + backward; a refusal is recorded, not fatal."""
    try:
        t0 = time.time()
        fn(*leaves)
        torch.cuda.synchronize()
        record["first_call_s"] = round(time.time() - t0, 1)
        record["fwd_ms"] = bench(lambda: fn(*leaves), args)
    except Exception as e:  # noqa: BLE001
        record["fwd_error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return
    try:
        grads = [x.detach().clone().requires_grad_() for x in leaves]
        fn(*grads).backward(do)  # untimed: the backward kernels autotune here
        torch.cuda.synchronize()

        def step():
            fn(*grads).backward(do)

        record["fwdbwd_ms"] = bench(step, args, grads)
    except Exception as e:  # noqa: BLE001
        record["fwdbwd_error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--ops", default="gla,linear,feature")
    parser.add_argument("--only", default="")
    parser.add_argument("--warmup", type=float, default=25.0)
    parser.add_argument("--rep", type=float, default=100.0)
    args = parser.parse_args()
    ops = set(args.ops.split(","))
    from fla.ops.gla import chunk_gla
    from fla.ops.linear_attn import chunk_linear_attn

    import fla

    timings = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla": getattr(fla, "__version__", "unknown"),
        "shapes": {},
    }
    path = os.path.join(args.out, "fla_gla_timings.json")
    dev = torch.device("cuda")
    for i, (b, t, h, d) in enumerate(SHAPES):
        name = f"B{b}_T{t}_H{h}_D{d}"
        if not wanted(args.only, name):
            continue
        gen = torch.Generator(device=dev).manual_seed(2000 + i)

        def randn(*shape):
            return torch.randn(*shape, device=dev, dtype=torch.float32, generator=gen)

        q, k, v, do = (randn(b, t, h, d).to(torch.bfloat16) for _ in range(4))
        entry = timings["shapes"].setdefault(name, {})

        def run(label, fn, leaves):
            rec = entry.setdefault(label, {})
            time_op(fn, leaves, do, args, rec)
            print(name, label, rec, flush=True)
            with open(path, "w") as f:
                json.dump(timings, f, indent=1)
        if "gla" in ops:
            g = F.logsigmoid(randn(b, t, h, d)).clamp_min(-5)
            run("chunk_gla", lambda q_, k_, v_, g_: chunk_gla(q_, k_, v_, g_)[0], [q, k, v, g])
        if "linear" in ops:
            run("chunk_linear_attn", lambda q_, k_, v_: chunk_linear_attn(q_, k_, v_, normalize=False)[0], [q, k, v])
        if "linear_normalized" in ops:
            run(
                "chunk_linear_attn(normalize=True)",
                lambda q_, k_, v_: chunk_linear_attn(q_, k_, v_, normalize=True)[0],
                [q, k, v],
            )
        if "feature" in ops:

            def fmap(q_, k_, v_):
                return chunk_linear_attn(F.elu(q_) + 1, F.elu(k_) + 1, v_, normalize=True)[0]

            run("elu+1 then chunk_linear_attn(normalize)", fmap, [q, k, v])


if __name__ == "__main__":
    main()
