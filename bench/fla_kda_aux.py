"""flash-linear-attention (FLA) timings for KDA's auxiliary ops, for bench/kda_side_by_side.ts.

Times, on the same shapes and dtypes as the attnkit side of bench/kda_side_by_side.ts (B4_T2048_H16_D128,
bf16 inputs, fp32 gates):
  - fla.ops.kda.gate.fused_kda_gate with lower_bound -5 (attnkit's boundGate): forward, and the backward
    alone (autograd of a fp32 output gradient);
  - fla.modules.conv.causal_conv1d, W = 4, silu (attnkit's causalConv1d): forward, and the backward alone;
  - optionally fla.ops.kda.chunk_kda forward and forward + backward (--kda), and its forward alone at
    other shapes (--kda-shapes B1_T8192_H96,B2_T16384_H16); --skip-aux leaves out the gate and conv timings.
Medians of triton.testing.do_bench after one untimed call (FLA's autotuning). Writes a JSON object
{name: ms} to --out. FLA's source must be importable (PYTHONPATH holding its fla/ folder).

    python3 bench/fla_kda_aux.py --out /tmp/fla_kda.json
"""

import argparse
import json

import torch
import torch.nn.functional as F
import triton.testing


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")


def kda_inputs(b, t, h, d, dev):
    """FLA's benchmark inputs for chunk_kda: bf16 q, v, L2-normalised k, gates logsigmoid(randn) clamped
    at -5 and beta sigmoid(rand), both fp32."""
    q = torch.randn(b, t, h, d, device=dev, dtype=torch.bfloat16)
    k = F.normalize(torch.randn(b, t, h, d, device=dev, dtype=torch.float32), dim=-1).to(torch.bfloat16)
    v = torch.randn(b, t, h, d, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(b, t, h, d, device=dev, dtype=torch.float32)).clamp(min=-5)
    beta = torch.rand(b, t, h, device=dev, dtype=torch.float32).sigmoid()
    return q, k, v, g, beta


def save(res, path):
    with open(path, "w") as f:
        json.dump(res, f)


def aux_ops(res, B, T, H, D, dev):
    """fused_kda_gate (lower bound -5) and causal_conv1d (W 4, silu): forward, and the backward alone."""
    from fla.ops.kda.gate import fused_kda_gate

    raw = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    a_log = torch.zeros(H, device=dev, dtype=torch.float32)
    dt_bias = torch.zeros(H * D, device=dev, dtype=torch.float32)
    res["gate_fwd"] = bench(lambda: fused_kda_gate(raw, a_log, dt_bias, lower_bound=-5.0))
    raw_g = raw.clone().requires_grad_(True)
    out = fused_kda_gate(raw_g, a_log, dt_bias, lower_bound=-5.0)
    dgate = torch.randn_like(out)
    res["gate_bwd"] = bench(lambda: torch.autograd.grad(out, raw_g, dgate, retain_graph=True))

    from fla.modules.conv import causal_conv1d

    C = H * D
    x = torch.randn(B, T, C, device=dev, dtype=torch.bfloat16)
    w = (0.5 * torch.randn(C, 4, device=dev)).to(torch.bfloat16)
    res["conv_fwd"] = bench(lambda: causal_conv1d(x, w, activation="silu"))
    x_g = x.clone().requires_grad_(True)
    y = causal_conv1d(x_g, w, activation="silu")
    y = y[0] if isinstance(y, tuple) else y
    dy = torch.randn_like(y)
    res["conv_bwd"] = bench(lambda: torch.autograd.grad(y, x_g, dy, retain_graph=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kda", action="store_true")
    ap.add_argument("--kda-shapes", default="", help="B1_T8192_H96,...: chunk_kda forward alone at these (D 128)")
    ap.add_argument("--skip-aux", action="store_true", help="leave out the gate and conv timings")
    args = ap.parse_args()
    B, T, H, D = 4, 2048, 16, 128
    dev = "cuda"
    res = {}

    from fla.ops.kda import chunk_kda

    for name in filter(None, args.kda_shapes.split(",")):
        b, t, h = (int(x[1:]) for x in name.split("_"))
        q, k, v, g, beta = kda_inputs(b, t, h, D, dev)
        res[f"kda_fwd_{name}_D{D}"] = bench(lambda: chunk_kda(q, k, v, g, beta))
        del q, k, v, g, beta
        save(res, args.out)  # each shape's time kept even if a later one runs out of time
    if not args.skip_aux:
        aux_ops(res, B, T, H, D, dev)
    if args.kda:
        q, k, v, g, beta = kda_inputs(B, T, H, D, dev)
        res["kda_fwd"] = bench(lambda: chunk_kda(q, k, v, g, beta))
        qs, ks, vs, gs = (t.clone().requires_grad_(True) for t in (q, k, v, g))
        do = torch.randn_like(v)

        def fwdbwd():
            o, _ = chunk_kda(qs, ks, vs, gs, beta)
            o.backward(do)

        res["kda_fwdbwd"] = bench(fwdbwd)

    save(res, args.out)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
