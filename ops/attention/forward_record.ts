/**
 * What each forward ran with, remembered by the tensors it wrote (its LSE and its output), so that an
 * explicit backward handed those tensors with other options (a forgotten `isCausal`, another scale) is
 * refused instead of returning wrong gradients.
 *
 * @module
 */
import { invalidArgument } from "../../ffi/errors.ts";
import type { Layout } from "../layout.ts";
import type { Tensor } from "../tensor.ts";
import type { ResolvedMask } from "./options.ts";

/** One side's sequence offsets: the tensor the kernel read, and its host copy when one was at hand. */
export interface RecordedSeqlens {
  /** The int32 offsets tensor. */
  readonly tensor: Tensor;
  /** The offsets on the host, when the call was given them there. */
  readonly host: Int32Array | undefined;
}

/** The options a forward resolved, as its backward must repeat them. */
export interface ForwardRecord {
  /** Layout of q, k, v and the output. */
  readonly layout: Layout;
  /** Mask with defaults applied. */
  readonly mask: ResolvedMask;
  /** The scale actually used (`1 / sqrt(D)` resolved). */
  readonly scale: number;
  /** 0 for none. */
  readonly softcap: number;
  /** Query offsets (packed calls). */
  readonly cuQ: RecordedSeqlens | undefined;
  /** Key offsets (packed calls). */
  readonly cuK: RecordedSeqlens | undefined;
}

// Keyed by the LSE and the output a forward wrote; a buffer written again holds the latest forward.
const records = new WeakMap<Tensor, ForwardRecord>();

/** Remembers what the forward that wrote `output` (and `lse`) ran with. */
export function recordForward(record: ForwardRecord, output: Tensor, lse: Tensor | undefined): void {
  records.set(output, record);
  if (lse) records.set(lse, record);
}

// Whether two masks admit the same keys on the right: causal and a right window of 0 are one rule.
function sameKeys(a: ResolvedMask, b: ResolvedMask): boolean {
  const right = (m: ResolvedMask) => (m.causal ? 0 : m.windowRight);
  return right(a) === right(b);
}

function showWindow(w: number): string {
  return w < 0 ? "-1 (unlimited)" : String(w);
}

function offsetsOf(s: RecordedSeqlens): Int32Array | undefined {
  if (s.host) return s.host;
  return s.tensor.disposed ? undefined : s.tensor.values("int32");
}

function showOffsets(o: Int32Array): string {
  const all = Array.from(o);
  return all.length > 8
    ? `[${all.slice(0, 8).join(", ")}, ...] (${all.length} entries)`
    : `[${all.join(", ")}]`;
}

// The first differing offsets, or undefined when they agree or one side cannot be read any more.
function seqlensDiffer(
  forward: RecordedSeqlens | undefined,
  call: RecordedSeqlens | undefined,
): [string, string] | undefined {
  if (!forward || !call || forward.tensor === call.tensor) return undefined;
  const a = offsetsOf(forward), b = offsetsOf(call);
  if (!a || !b) return undefined;
  if (a.length === b.length && a.every((x, i) => x === b[i])) return undefined;
  return [showOffsets(a), showOffsets(b)];
}

/**
 * Refuses a backward whose options contradict the forward that wrote its `lse` (or, failing that, its
 * `output`), naming the option and both values. Tensors no forward wrote are not checked.
 */
export function expectSameForward(op: string, call: ForwardRecord, output: unknown, lse: unknown): void {
  for (const [name, tensor] of [["lse", lse], ["output", output]] as const) {
    const forward = typeof tensor === "object" && tensor !== null ? records.get(tensor as Tensor) : undefined;
    if (!forward) continue;
    const differences: [string, string, string][] = [
      ["layout", JSON.stringify(forward.layout), JSON.stringify(call.layout)],
      ["windowSizeLeft", showWindow(forward.mask.windowLeft), showWindow(call.mask.windowLeft)],
    ];
    if (!sameKeys(forward.mask, call.mask)) {
      differences.push(
        ["isCausal", String(forward.mask.causal), String(call.mask.causal)],
        ["windowSizeRight", showWindow(forward.mask.windowRight), showWindow(call.mask.windowRight)],
      );
    }
    differences.push(
      ["scale", String(forward.scale), String(call.scale)],
      ["softcap", String(forward.softcap), String(call.softcap)],
    );
    const cuQ = seqlensDiffer(forward.cuQ, call.cuQ);
    if (cuQ) differences.push(["cuSeqlensQ", ...cuQ]);
    const cuK = seqlensDiffer(forward.cuK, call.cuK);
    if (cuK) differences.push(["cuSeqlensK", ...cuK]);
    for (const [option, was, is] of differences) {
      if (was === is) continue;
      throw invalidArgument(
        op,
        `${option}: the forward that produced ${name} ran with ${option}: ${was}, this call has ${option}: ${is}; ` +
          "pass the forward's options (or call backward() on the forward's result)",
      );
    }
    return; // checked against the LSE's forward (the one the gradients depend on most)
  }
}
