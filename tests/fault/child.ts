// Run by tests/device_fault.test.ts in a process of its own: makes a kernel fault on purpose (a fill of a
// descriptor whose pointer is not device memory), then reports what the next calls throw. Prints one
// line of JSON: the error of the call that first sees the fault, and of a call after it.
import { encodeDescriptor } from "../../ffi/descriptor.ts";
import { native } from "../../ffi/library.ts";
import { AttnkitError, synchronize, Tensor } from "../../mod.ts";

function attempt(fn: () => void): { code: string; message: string } | null {
  try {
    fn();
    return null;
  } catch (e) {
    return {
      code: e instanceof AttnkitError ? e.code : `not an AttnkitError: ${(e as Error).name}`,
      message: String((e as Error).message),
    };
  }
}

const bogus = encodeDescriptor({
  ptr: Deno.UnsafePointer.create(0x10n), // not device memory: the fill kernel faults
  dtype: 1, // float32
  deviceType: 1,
  deviceIndex: 0,
  shape: [1 << 20],
  strides: [1],
});
native().ak_fill(bogus, 1); // the launch itself may well succeed: the fault is asynchronous
const first = attempt(() => synchronize("cuda"));
const later = attempt(() => Tensor.zeros([4], { device: "cuda" }).dispose());
console.log(JSON.stringify({ first, later }));
