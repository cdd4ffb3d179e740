/**
 * The command line's `attention-decode` case: `GroupedQueryAttentionDecodeWithKVCacheFwdOp`, one query
 * token per sequence (q `[B, H, D]`) against a contiguous KV cache (k, v `[B, SKV, HKV, D]`, every row
 * valid), scale D^-0.5, on standard normal inputs, against the float64 attention oracle over that one
 * query, held to FlashAttention's rule as the decode tests hold it: the max abs error at most 2x that of a
 * same-precision reference, plus the rounding allowance and 1e-5 (attention.ts). Forward only; timed in
 * GB/s, the least bytes a step moves (`leastBytes`): the K and V cache rows read once, q read and o
 * written once.
 *
 * Inputs: those of the attention case (attention.ts) with one query token, q viewed without its token
 * axis; seeds seed (q), seed + 1 (k), seed + 2 (v).
 *
 * @module
 */
import { GroupedQueryAttentionDecodeWithKVCacheFwdOp, Tensor } from "../mod.ts";
import { attentionForward as referenceForward, FLOAT64, samePrecision } from "../reference/attention.ts";
import { attentionInputs, attentionProblem, flashRuleRow } from "./attention.ts";
import { leastBytes } from "./flops.ts";
import { type CaseSettings, type CheckRow, hostValues, type Mode, type OpCase } from "./problem.ts";

// The op takes no output buffer to poison. A NaN-filled block of the output's size, freed just before the
// call, may come back from the allocator as the op's output (on the CPU only a small block does, and not
// whole), so an element the op leaves unwritten may show as NaN: a best effort, not a guarantee.
function poisonPool(shape: readonly number[], like: Tensor): void {
  using block = Tensor.empty(shape, { dtype: like.dtype, device: like.device });
  block.fill(NaN);
}

/** A random GQA decode step over a contiguous KV cache. */
export function attentionDecodeCase(settings: CaseSettings): OpCase {
  const { shape, dtype } = settings;
  const B = shape.batch, L = shape.seqKv, H = shape.heads, HKV = shape.headsKv, D = shape.dim;
  // Made first: it refuses sizes no kernel serves (D a multiple of 8 up to 256) before any tensor exists.
  const op = new GroupedQueryAttentionDecodeWithKVCacheFwdOp({
    batch: B,
    heads: H,
    headsKv: HKV,
    seqlenKv: L,
    dim: D,
  });
  const inputs = attentionInputs(settings); // q [B, 1, H, D]: the shape's seq is 1
  const { k, v, owned } = inputs;
  let q: Tensor;
  try {
    q = inputs.q.reshape([B, H, D]);
    owned.push(q);
  } catch (e) {
    inputs[Symbol.dispose]();
    throw e;
  }

  return {
    description: `q [${B}, ${H}, ${D}] ${dtype}; k, v cache [${B}, ${L}, ${HKV}, ${D}] ${dtype}, every row ` +
      `valid; scale D^-0.5`,
    modes: ["fwd"],

    check(batches, _backward, progress): CheckRow[] {
      poisonPool([B, H, D], q);
      using output = op.forward(q, k, v);
      const { problem, nextPass } = attentionProblem({ q, k, v }, shape, false, batches, 2, progress);
      const oracle = referenceForward(problem, FLOAT64);
      nextPass();
      const plain = referenceForward(problem, samePrecision(dtype as "bfloat16"));
      const actual = hostValues(output, batches * H * D);
      return [flashRuleRow("output", actual, oracle.output, plain.output, "forward", dtype)];
    },

    call(mode: Mode): () => void {
      if (mode !== "fwd") throw new Error(`attention-decode times fwd only, not ${mode}`);
      return () => op.forward(q, k, v).dispose();
    },

    // Written: o, shaped like q.
    bytes: (mode: Mode) => mode === "fwd" ? leastBytes([q, k, v], [q]) : undefined,

    [Symbol.dispose]: inputs[Symbol.dispose],
  };
}
