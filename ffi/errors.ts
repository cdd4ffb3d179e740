/**
 * Errors raised by attnkit, and the status codes of its C ABI.
 *
 * @module
 */

/** Status codes of the C ABI (`ak_status` in `csrc/include/attnkit.h`). */
export const Status = {
  OK: 0,
  INVALID_ARGUMENT: 1,
  OUT_OF_MEMORY: 2,
  CUDA: 3,
  UNSUPPORTED: 4,
  NO_DEVICE: 5,
  INTERNAL: 6,
} as const;

/** The name of a status, as `AttnkitError.code` spells it. */
export type ErrorCode =
  | "INVALID_ARGUMENT"
  | "OUT_OF_MEMORY"
  | "CUDA"
  | "UNSUPPORTED"
  | "NO_DEVICE"
  | "INTERNAL"
  | "LIBRARY_NOT_FOUND";

const codeNames: Record<number, ErrorCode> = {
  1: "INVALID_ARGUMENT",
  2: "OUT_OF_MEMORY",
  3: "CUDA",
  4: "UNSUPPORTED",
  5: "NO_DEVICE",
  6: "INTERNAL",
};

/**
 * Every failure attnkit reports: bad arguments (the message names the argument and what was
 * expected), devices, memory and the native library.
 *
 * @example
 * ```ts
 * import { AttnkitError, Tensor } from "@attnkit/attnkit";
 * try {
 *   Tensor.zeros([2, 3]).reshape([4]);
 * } catch (e) {
 *   if (e instanceof AttnkitError) console.log(e.code, e.message);
 * }
 * ```
 */
export class AttnkitError extends Error {
  /** What kind of failure this is. */
  readonly code: ErrorCode;
  /** The op or function that failed, e.g. `"chunkGatedDeltaRule"` or `"ak_copy"`. */
  readonly op: string;

  /** Makes an error; `op` names the operation, `message` what was wrong. */
  constructor(code: ErrorCode, op: string, message: string) {
    super(`${op}: ${message}`);
    this.name = "AttnkitError";
    this.code = code;
    this.op = op;
  }
}

/** Makes the INVALID_ARGUMENT error that argument checks throw. */
export function invalidArgument(op: string, message: string): AttnkitError {
  return new AttnkitError("INVALID_ARGUMENT", op, message);
}

/** Maps a status code to its name. */
export function statusName(status: number): ErrorCode {
  return codeNames[status] ?? "INTERNAL";
}
