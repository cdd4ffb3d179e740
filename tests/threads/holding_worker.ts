// A Worker for tests/threads.test.ts: "hold" allocates a 1 MiB tensor and keeps it, "release" frees it;
// each replies with the bytes this thread then holds.
import { memoryStats, Tensor } from "../../mod.ts";

const scope = self as unknown as {
  onmessage: ((e: MessageEvent<"hold" | "release">) => void) | null;
  postMessage(data: unknown): void;
};
let held: Tensor | undefined;

scope.onmessage = (e: MessageEvent<"hold" | "release">) => {
  if (e.data === "hold") held = Tensor.zeros([1 << 18], { dtype: "float32" });
  else held?.dispose();
  scope.postMessage(memoryStats("cpu").threadBytesInUse);
};
