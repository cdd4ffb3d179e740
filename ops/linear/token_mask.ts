/**
 * Masks for packed calls with spare capacity: a packed batch `[1, T, ...]` whose offsets end at
 * `cuSeqlens[N] < T` leaves its rows past that point unspecified (the kernels neither read nor write
 * them). These helpers zero those rows where values cross into ordinary layers, computed on the device
 * from the device-resident last offset (no host read, so a graph that captures them stays valid when the
 * lengths change):
 *
 *   using mask = activeTokenMask(hidden, cuSeqlens);   // [1, T] bool: t < cuSeqlens[N]
 *   using h = maskInactiveTokens(hidden, mask);        // inactive rows zero (NaN rows too)
 *   ...
 *   using dIn = maskInactiveTokenGradients(x, mask).backward(dOut); // gradient rows masked
 *
 * States have one row per sequence, not per token: never apply a token mask to them.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import { expectSameDevice, expectTensor } from "../checks.ts";
import { int32Seqlens } from "../seqlens.ts";
import { Tensor } from "../tensor.ts";
import { where } from "../tensor_math/elementwise.ts";

/** What {@link maskInactiveTokenGradients} returns: the values unchanged, the gradient masked. */
export interface MaskedGradients {
  /** The input itself (not a copy, not owned by this result). */
  readonly value: Tensor;
  /** The gradient of `value` with the rows of inactive tokens zero: a new tensor of dValue's dtype. */
  backward(dValue: Tensor): Tensor;
}

function checkPacked(op: string, name: string, x: unknown): Tensor {
  const t = expectTensor(op, name, x);
  if (t.ndim < 2 || t.shape[0] !== 1) {
    throw invalidArgument(op, `${name}: expected a packed batch [1, T, ...], got [${t.shape.join(", ")}]`);
  }
  return t;
}

function checkMask(op: string, mask: unknown, x: Tensor, name: string): Tensor {
  const m = expectTensor(op, "activeMask", mask);
  if (m.dtype !== "bool" || m.ndim !== 2 || m.shape[0] !== 1 || m.shape[1] !== x.shape[1]) {
    throw invalidArgument(
      op,
      `activeMask: expected bool [1, T=${x.shape[1]}] (from activeTokenMask), got ${m.dtype} [${
        m.shape.join(", ")
      }]`,
    );
  }
  expectSameDevice(op, "activeMask", m, x, name);
  return m;
}

/** Rows of x (or of a tensor shaped like it) where the mask is true, zero elsewhere. */
function masked(x: Tensor, mask: Tensor): Tensor {
  using m = mask.reshape([1, x.shape[1], ...x.shape.slice(2).map(() => 1)]);
  return where(m, x, 0);
}

/**
 * The active-token predicate of a packed batch `[1, T, ...]`: `[1, T]` bool, true where `t <
 * cuSeqlens[N]`. Formed on x's device from the offsets' last entry there; host offsets are uploaded
 * first.
 *
 * @example
 * ```ts
 * import { activeTokenMask, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([1, 6, 4]);
 * using mask = activeTokenMask(x, [0, 2, 4]); // 4 of 6 rows in use
 * console.log(mask.toArray()); // Uint8Array [1, 1, 1, 1, 0, 0]
 * ```
 */
export function activeTokenMask(x: Tensor, cuSeqlens: Tensor | readonly number[] | Int32Array): Tensor {
  const op = "activeTokenMask";
  const t = checkPacked(op, "x", x);
  using offsets = int32Seqlens(op, "cuSeqlens", cuSeqlens, t.device);
  using end = offsets.tensor.slice(0, -1);
  using positions = Tensor.arange(t.shape[1], undefined, 1, { dtype: "int32", device: t.device });
  using active = positions.lt(end);
  return active.reshape([1, t.shape[1]]);
}

/**
 * x with the rows of inactive tokens set to zero (whatever they held, NaN included): a new tensor of
 * x's dtype.
 *
 * @example
 * ```ts
 * import { activeTokenMask, maskInactiveTokens, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.full([1, 3, 2], NaN);
 * using mask = activeTokenMask(x, [0, 0]); // nothing in use
 * using y = maskInactiveTokens(x, mask);
 * console.log(y.toArray()); // Float32Array [0, 0, 0, 0, 0, 0]
 * ```
 */
export function maskInactiveTokens(x: Tensor, activeMask: Tensor): Tensor {
  const op = "maskInactiveTokens";
  const t = checkPacked(op, "x", x);
  return masked(t, checkMask(op, activeMask, t, "x"));
}

/**
 * A gradient barrier: the value passes unchanged, the gradient that comes back has the rows of inactive
 * tokens zero. Place it after a layer whose input gradient must not receive what a packed kernel left
 * unspecified past the last offset.
 *
 * @example
 * ```ts
 * import { activeTokenMask, maskInactiveTokenGradients, Tensor } from "@attnkit/attnkit";
 * using x = Tensor.randn([1, 4, 2]);
 * using mask = activeTokenMask(x, [0, 3]);
 * const barrier = maskInactiveTokenGradients(x, mask);
 * using dOut = Tensor.ones([1, 4, 2]);
 * using dx = barrier.backward(dOut);
 * console.log(dx.toArray()); // Float32Array [1, 1, 1, 1, 1, 1, 0, 0]
 * ```
 */
export function maskInactiveTokenGradients(x: Tensor, activeMask: Tensor): MaskedGradients {
  const op = "maskInactiveTokenGradients";
  const t = checkPacked(op, "x", x);
  const m = checkMask(op, activeMask, t, "x");
  return {
    value: t,
    backward(dValue: Tensor): Tensor {
      const bop = "MaskedGradients.backward";
      const d = expectTensor(bop, "dValue", dValue);
      if (d.ndim !== t.ndim || d.shape.some((n, i) => n !== t.shape[i])) {
        throw invalidArgument(
          bop,
          `dValue: expected shape [${t.shape.join(", ")}], got [${d.shape.join(", ")}]`,
        );
      }
      expectSameDevice(bop, "dValue", d, t, "x");
      if (m.disposed) {
        throw invalidArgument(bop, "activeMask: disposed after the barrier was made; keep it until backward");
      }
      return masked(d, m);
    },
  };
}
