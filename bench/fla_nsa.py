"""flash-linear-attention (FLA) timing of native sparse attention's forward, for bench/sparse_side_by_side.ts.

fla.ops.nsa.parallel_nsa with the compressed branch (g_cmp), the selected branch (g_slc, block indices chosen
by FLA's top-k from the compressed scores) and no sliding window, one packed sequence of T tokens, 64 query
heads over 4 KV heads (groups of 16), D = 128, block 64, 16 selected blocks, bf16. Median of
triton.testing.do_bench after one untimed call (FLA's autotuning). Writes {shape: ms} to --out, the shape
named as the TypeScript side names it. FLA's source must be importable (PYTHONPATH holding its fla/ folder).

    python3 bench/fla_nsa.py --out /tmp/fla_nsa.json --scale 1
"""

import argparse
import json

import torch
import triton.testing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    from fla.ops.nsa import parallel_nsa

    dev = "cuda"
    T, HQ, G, D, bs, S = 32768 // args.scale, 64, 16, 128, 64, 16
    H = HQ // G
    q = torch.randn(1, T, HQ, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16)
    g_cmp = torch.rand(1, T, HQ, device=dev, dtype=torch.bfloat16)
    g_slc = torch.rand(1, T, HQ, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, T], device=dev, dtype=torch.int32)

    def fn():
        parallel_nsa(q, k, v, g_cmp=g_cmp, g_slc=g_slc, block_counts=S, block_size=bs, cu_seqlens=cu)

    fn()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")
    shape = f"T{T}_H{HQ}_G{G}_D{D}_bs{bs}_S{S}"
    with open(args.out, "w") as f:
        json.dump({shape: ms}, f)
    print(shape, ms)


if __name__ == "__main__":
    main()
