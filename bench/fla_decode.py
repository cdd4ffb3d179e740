"""flash-linear-attention (FLA) timings of one serving decode step, for bench/paged_decode_side_by_side.ts.

The shape of the serving issue: a state pool of 1024 slots, a batch of 256 sequences (slots 1..256), H = 32
heads, K = V = 128, fp32 states in FLA's [slot, H, V, K] order (state_v_first), bf16 projections:
  - kda: fla.ops.kda.fused_recurrent.fused_recurrent_kda_fwd with the gate (bounded, lower bound -5), beta's
    sigmoid and the q/k L2 norm in the kernel and the pool updated in place through ssm_state_indices;
  - gdn: fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule with the gate, beta's sigmoid and the
    L2 norm in the kernel; it has no slot indices, so the pool rows are gathered before and scattered back
    after (what a caller of it must do), all three timed together.
Medians of triton.testing.do_bench after one untimed call (FLA's autotuning). Writes {name: ms} to --out.
FLA's source must be importable (PYTHONPATH holding its fla/ folder).

    python3 bench/fla_decode.py --out /tmp/fla_decode.json
"""

import argparse
import json

import torch
import triton.testing


def bench(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dev = "cuda"
    slots, B, H, K, V = 1024, 256, 32, 128, 128
    res = {}
    idx = torch.arange(1, B + 1, device=dev, dtype=torch.int32)
    q = torch.randn(B, 1, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, 1, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, 1, H, V, device=dev, dtype=torch.bfloat16)
    beta = torch.randn(B, 1, H, device=dev, dtype=torch.bfloat16)
    a_log = torch.zeros(H, device=dev, dtype=torch.float32)

    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    pool = torch.randn(slots, H, V, K, device=dev, dtype=torch.float32) * 0.1
    g = torch.randn(B, 1, H, K, device=dev, dtype=torch.bfloat16)
    dt_k = torch.zeros(H * K, device=dev, dtype=torch.float32)
    res["kda_decode"] = bench(lambda: fused_recurrent_kda_fwd(
        q, k, v, g, beta, A_log=a_log, dt_bias=dt_k, initial_state=pool, inplace_final_state=True,
        state_v_first=True, ssm_state_indices=idx.view(B, 1), use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, lower_bound=-5.0))

    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    g_h = torch.randn(B, 1, H, device=dev, dtype=torch.bfloat16)
    dt_h = torch.zeros(H, device=dev, dtype=torch.float32)
    index = idx.long()

    def gdn_step():
        init = pool.index_select(0, index)
        _, final = fused_recurrent_gated_delta_rule(
            q, k, v, g=g_h, beta=beta, initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True,
            use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_h, use_beta_sigmoid_in_kernel=True,
            state_v_first=True)
        pool.index_copy_(0, index, final)

    res["gdn_decode"] = bench(gdn_step)
    print(json.dumps(res))
    with open(args.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
