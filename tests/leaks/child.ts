// Run by tests/leaks.test.ts in a process of its own, with --v8-flags=--expose-gc: drops tensors
// without dispose(), forces collections until the library has counted them gone, and prints one
// line of JSON with the memory statistics before, while the tensors are unreachable, and after.
// Argument: "report" turns leak reports on with setDebug; anything else leaves the setting alone.
import { memoryStats, setDebug, Tensor } from "../../mod.ts";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run this with --v8-flags=--expose-gc");
if (Deno.args[0] === "report") setDebug({ leaks: true });

const base = memoryStats("cpu");
function makeAndDrop(): void {
  Tensor.zeros([64]); // dropped without dispose()
}
for (let i = 0; i < 3; i++) makeAndDrop();
const dropped = memoryStats("cpu");
// Finalizers run in a task after the collection that finds their objects.
for (let round = 0; round < 50 && memoryStats("cpu").liveTensors > base.liveTensors; round++) {
  gc();
  await new Promise((resolve) => setTimeout(resolve, 0));
}
console.log(JSON.stringify({ base, dropped, after: memoryStats("cpu") }));
