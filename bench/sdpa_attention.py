"""PyTorch's scaled_dot_product_attention on the benchmark shapes, for attnkit's side-by-side run.

For each shape (ANCHORS.md's softmax-attention table) it draws bf16 inputs in BSHD layout, runs SDPA
with the FlashAttention-2 and the cuDNN backends (torch.nn.attention.sdpa_kernel picks each one),
saves the inputs, the outputs, an output gradient and FlashAttention-2's input gradients to
<out>/<shape>.safetensors (all BSHD, contiguous), and times forward, backward and forward+backward
of each backend with triton.testing.do_bench (medians) into <out>/sdpa_timings.json.

Run by bench/attention_side_by_side.ts (through Deno.Command) on the GPU machine:
    python3 bench/sdpa_attention.py --out /tmp/attnkit_sdpa
"""

import argparse
import json
import os
import sys

import torch
import triton.testing
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

# (batch, seq, heads, kv heads, head dim, causal)
SHAPES = [
    (4, 4096, 32, 32, 128, True),
    (4, 4096, 32, 32, 128, False),
    (4, 4096, 32, 8, 128, True),
    (8, 2048, 16, 16, 64, True),
]

BACKENDS = {
    "sdpa_flash2": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
}


def shape_name(b, s, h, hk, d, causal):
    return f"B{b}_S{s}_H{h}_KV{hk}_D{d}" + ("_causal" if causal else "")


def attend(q, k, v, causal, gqa):
    """SDPA on BHSD views; GQA natively when the backend takes enable_gqa, else by expanding K/V."""
    if gqa == "native":
        return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    if gqa == "expanded":
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    return sdpa(q, k, v, is_causal=causal)


def bench(fn, warmup, rep, grad_to_none=None):
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none, return_mode="median")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="folder for the .safetensors files and sdpa_timings.json")
    parser.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=float, default=100.0, help="do_bench repetition time, ms")
    parser.add_argument("--only", default="", help="run only shapes whose name contains this")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    timings = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "shapes": {},
    }
    for i, (b, s, h, hk, d, causal) in enumerate(SHAPES):
        name = shape_name(b, s, h, hk, d, causal)
        if args.only and args.only not in name:
            continue
        gen = torch.Generator(device=device).manual_seed(1234 + i)
        # BSHD storage, as attnkit reads it; SDPA gets BHSD views of the same memory.
        q = torch.randn(b, s, h, d, device=device, dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, s, hk, d, device=device, dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, s, hk, d, device=device, dtype=torch.bfloat16, generator=gen)
        do = torch.randn(b, s, h, d, device=device, dtype=torch.bfloat16, generator=gen)
        qt, kt, vt, dot = (x.transpose(1, 2) for x in (q, k, v, do))
        tensors = {"q": q, "k": k, "v": v, "do": do}
        entry = {"batch": b, "seq": s, "heads": h, "heads_kv": hk, "dim": d, "causal": causal, "backends": {}}
        for label, backend in BACKENDS.items():
            record = {}
            try:
                with sdpa_kernel([backend]):
                    gqa = "none"
                    if hk != h:
                        try:
                            attend(qt, kt, vt, causal, "native")
                            gqa = "native"
                        except RuntimeError:
                            gqa = "expanded"
                    record["gqa"] = gqa
                    out = attend(qt, kt, vt, causal, gqa)
                    tensors[f"o_{label}"] = out.transpose(1, 2).contiguous()
                    record["fwd_ms"] = bench(lambda: attend(qt, kt, vt, causal, gqa), args.warmup, args.rep)
                    qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))
                    og = attend(qg, kg, vg, causal, gqa)
                    grads = torch.autograd.grad(og, (qg, kg, vg), dot, retain_graph=True)
                    if label == "sdpa_flash2":
                        for gname, g in zip(("dq", "dk", "dv"), grads):
                            tensors[f"{gname}_{label}"] = g.transpose(1, 2).contiguous()
                    record["bwd_ms"] = bench(
                        lambda: torch.autograd.grad(og, (qg, kg, vg), dot, retain_graph=True), args.warmup, args.rep
                    )
                    record["fwdbwd_ms"] = bench(
                        lambda: torch.autograd.grad(attend(qg, kg, vg, causal, gqa), (qg, kg, vg), dot),
                        args.warmup,
                        args.rep,
                    )
                    del og, grads
            except RuntimeError as e:  # a backend that refuses the shape is recorded, not fatal
                record["error"] = str(e).splitlines()[0][:300]
            entry["backends"][label] = record
            print(f"{name} {label}: " + ", ".join(f"{k_}={v_}" for k_, v_ in record.items()), flush=True)
        save_file({k_: v_.contiguous() for k_, v_ in tensors.items()}, os.path.join(args.out, f"{name}.safetensors"))
        timings["shapes"][name] = entry
        del tensors, q, k, v, do, qt, kt, vt, dot
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "sdpa_timings.json"), "w") as f:
        json.dump(timings, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
