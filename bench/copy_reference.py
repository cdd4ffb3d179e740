"""What the byte patterns of the gate transform and the causal conv1d cost as plain PyTorch copies on this GPU.

The gate forward reads n bf16 values and writes n fp32 ones; the conv forward reads and writes n bf16 values.
Their "copy ceiling" targets are judged against these: CUDA events, a 256 MiB buffer cleared before each call
so the L2 holds none of the inputs, median of 30 calls after 3 warm-up calls.

    python3 bench/copy_reference.py --out bench/results/<date>_copy_reference.json
"""
import argparse
import json

import torch


def median_ms(fn, iterations=30):
    flush = torch.empty(64 * 1024 * 1024, device="cuda")
    for _ in range(3):
        fn()
    times = []
    for _ in range(iterations):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    n = 4 * 2048 * 16 * 128  # B4_T2048_H16_D128, and B4_T2048_C2048
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y32 = torch.empty(n, device="cuda")
    y16 = torch.empty_like(x)
    r = {"gpu": torch.cuda.get_device_name(), "n": n}
    r["convert_bf16_fp32_ms"] = median_ms(lambda: y32.copy_(x))
    r["convert_GBs"] = n * 6 / r["convert_bf16_fp32_ms"] / 1e6
    r["copy_bf16_ms"] = median_ms(lambda: y16.copy_(x))
    r["copy_GBs"] = n * 4 / r["copy_bf16_ms"] / 1e6
    big, big2 = torch.empty(4 * n, device="cuda", dtype=torch.bfloat16), torch.empty(4 * n, device="cuda", dtype=torch.bfloat16)
    r["copy_4x_ms"] = median_ms(lambda: big2.copy_(big))
    r["copy_4x_GBs"] = n * 16 / r["copy_4x_ms"] / 1e6
    print(json.dumps(r))
    with open(args.out, "w") as f:
        json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
