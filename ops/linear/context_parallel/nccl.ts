/**
 * A communicator over NCCL, the collective library of multi-GPU PyTorch jobs, loaded at run time (never
 * shipped with attnkit): from `options.library`, the system's `libnccl.so.2`, or PyTorch's
 * `nvidia-nccl` package in a Python site folder. One rank per process (or per Worker), each on its own
 * GPU; rank 0 makes a unique id and every rank passes the same one to `NcclGroup.create` (through a
 * file with `shareNcclId`, an environment variable, or a launcher). The all-gather runs on attnkit's
 * stream of the calling thread, so it is ordered with the kernels before and after it. NVLink
 * multicast (`NCCL_NVLS_ENABLE`) is off unless the environment sets it.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../../../ffi/errors.ts";
import { native, unwrap } from "../../../ffi/library.ts";
import { checkOptions } from "../../args.ts";
import { expectTensor } from "../../checks.ts";
import { parseDevice } from "../../device.ts";
import { Tensor } from "../../tensor.ts";
import type { Communicator } from "./communicator.ts";

const ID_BYTES = 128;
const NCCL_FLOAT32 = 7;

const SYMBOLS = {
  ncclGetVersion: { parameters: ["buffer"], result: "i32" },
  ncclGetUniqueId: { parameters: ["buffer"], result: "i32" },
  ncclCommInitRank: {
    parameters: ["buffer", "i32", { struct: new Array(ID_BYTES).fill("u8") }, "i32"],
    result: "i32",
  },
  ncclAllGather: { parameters: ["pointer", "pointer", "usize", "i32", "pointer", "pointer"], result: "i32" },
  ncclCommDestroy: { parameters: ["pointer"], result: "i32" },
  ncclGetErrorString: { parameters: ["i32"], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

type Nccl = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

const loaded = new Map<string, Nccl>();

/** Where NCCL is looked for when no path is given: the loader's search, then Python site folders. */
function candidates(): string[] {
  const out = ["libnccl.so.2", "libnccl.so"];
  const roots = ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"];
  const home = Deno.env.get("HOME");
  if (home) roots.push(`${home}/.local/lib`);
  const venv = Deno.env.get("VIRTUAL_ENV");
  if (venv) roots.push(`${venv}/lib`);
  for (const root of roots) {
    try {
      for (const e of Deno.readDirSync(root)) {
        if (!e.isDirectory || !e.name.startsWith("python3")) continue;
        for (const site of ["site-packages", "dist-packages"]) {
          out.push(`${root}/${e.name}/${site}/nvidia/nccl/lib/libnccl.so.2`);
        }
      }
    } catch {
      // a root that does not exist, or that this process may not read
    }
  }
  return out;
}

function load(op: string, library?: string): Nccl {
  const key = library ?? "";
  const known = loaded.get(key);
  if (known) return known;
  const tried: string[] = [];
  for (const path of library ? [library] : candidates()) {
    try {
      const lib = Deno.dlopen(path, SYMBOLS).symbols;
      loaded.set(key, lib);
      return lib;
    } catch (e) {
      if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) {
        throw new AttnkitError(
          "LIBRARY_NOT_FOUND",
          op,
          `loading NCCL needs --allow-ffi (${(e as Error).message})`,
        );
      }
      tried.push(path);
    }
  }
  throw new AttnkitError(
    "LIBRARY_NOT_FOUND",
    op,
    `NCCL was not found (tried ${tried.join(", ")}). Install it (the system's libnccl2, or PyTorch's ` +
      "`pip install nvidia-nccl-cu12`) or pass options.library with the path of libnccl.so.2",
  );
}

function check(nccl: Nccl, op: string, what: string, status: number): void {
  if (status === 0) return;
  const text = nccl.ncclGetErrorString(status);
  const reason = text ? new Deno.UnsafePointerView(text).getCString() : `status ${status}`;
  throw new AttnkitError("CUDA", op, `${what} failed: ${reason}`);
}

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function idBytes(op: string, id: unknown): Uint8Array<ArrayBuffer> {
  if (typeof id !== "string" || !/^[0-9a-f]{256}$/.test(id)) {
    throw invalidArgument(
      op,
      `options.id: expected the 256 hex digits of ncclUniqueId(), got ${String(id).slice(0, 40)}`,
    );
  }
  return Uint8Array.from({ length: ID_BYTES }, (_, i) => parseInt(id.slice(2 * i, 2 * i + 2), 16));
}

/**
 * A new NCCL unique id, as 256 hex digits: rank 0 makes it and every rank of the group passes the same
 * one to `NcclGroup.create`.
 *
 * @example
 * ```ts ignore
 * import { ncclUniqueId } from "@attnkit/attnkit";
 * Deno.env.set("ATTNKIT_NCCL_ID", ncclUniqueId()); // before starting the other ranks' processes
 * ```
 */
export function ncclUniqueId(options: { library?: string } = {}): string {
  const op = "ncclUniqueId";
  const o = checkOptions<{ library?: string }>(op, options, { library: "string" });
  const nccl = load(op, o.library);
  const id = new Uint8Array(ID_BYTES);
  check(nccl, op, "ncclGetUniqueId", nccl.ncclGetUniqueId(id));
  return hex(id);
}

/**
 * The group's unique id through a file every rank can read: rank 0 makes it and writes it (atomically),
 * the others wait for it (up to `timeoutMs`, default 60 s). Remove the file after the group exists.
 *
 * @example
 * ```ts ignore
 * import { NcclGroup, shareNcclId } from "@attnkit/attnkit";
 * const rank = Number(Deno.env.get("RANK")), world = Number(Deno.env.get("WORLD_SIZE"));
 * const id = await shareNcclId("/tmp/attnkit-nccl-id", { rank });
 * using group = NcclGroup.create({ rank, world, id });
 * ```
 */
export async function shareNcclId(
  path: string,
  options: { rank: number; library?: string; timeoutMs?: number },
): Promise<string> {
  const op = "shareNcclId";
  if (typeof path !== "string" || path === "") throw invalidArgument(op, "path: expected a file path");
  const o = checkOptions<{ rank: number; library?: string; timeoutMs?: number }>(op, options, {
    rank: "integer",
    library: "string",
    timeoutMs: "number",
  });
  if (!Number.isInteger(o.rank) || o.rank < 0) {
    throw invalidArgument(op, `options.rank: expected an integer >= 0`);
  }
  if (o.rank === 0) {
    const id = ncclUniqueId({ library: o.library });
    const temp = `${path}.${Deno.pid}.tmp`;
    await Deno.writeTextFile(temp, id);
    await Deno.rename(temp, path);
    return id;
  }
  const until = Date.now() + (o.timeoutMs ?? 60_000);
  while (true) {
    try {
      const id = (await Deno.readTextFile(path)).trim();
      idBytes(op, id);
      return id;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    if (Date.now() > until) {
      throw new AttnkitError("INVALID_ARGUMENT", op, `no id appeared in ${path} in time`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Options of {@link NcclGroup.create}. */
export interface NcclGroupOptions {
  /** This process's rank, in `[0, world)`. */
  rank: number;
  /** Ranks in the group. */
  world: number;
  /** The group's unique id (`ncclUniqueId()` on rank 0), the same on every rank. */
  id: string;
  /** This rank's GPU (default `"cuda"`, device 0). */
  device?: string;
  /** Path of libnccl.so.2 (default: the system's, then PyTorch's `nvidia-nccl` package). */
  library?: string;
}

/**
 * One rank's end of an NCCL group: a {@link Communicator} for the context-parallel recipes. Creating it
 * waits until every rank has joined.
 *
 * @example
 * ```ts ignore
 * import { contextParallelGdn, NcclGroup, ContextParallelPlan, shareNcclId } from "@attnkit/attnkit";
 * const rank = Number(Deno.env.get("RANK")), world = 2;
 * using group = NcclGroup.create({ rank, world, id: await shareNcclId("/tmp/id", { rank }) });
 * const plan = ContextParallelPlan.fromFragments([0, 131072], [[[0, 65536]], [[65536, 131072]]], rank);
 * // ... contextParallelGdn(q, k, v, g, beta, { plan, group })
 * ```
 */
export class NcclGroup implements Communicator, Disposable {
  #comm: Deno.PointerValue;
  readonly #nccl: Nccl;
  readonly #index: number;

  private constructor(
    nccl: Nccl,
    comm: Deno.PointerValue,
    /** This rank. */
    readonly rank: number,
    /** Ranks in the group. */
    readonly world: number,
    /** The GPU the group runs on. */
    readonly device: string,
    index: number,
  ) {
    this.#nccl = nccl;
    this.#comm = comm;
    this.#index = index;
  }

  /** Joins the group (blocks until every rank has called it). */
  static create(options: NcclGroupOptions): NcclGroup {
    const op = "NcclGroup.create";
    const o = checkOptions<NcclGroupOptions>(op, options, {
      rank: "integer",
      world: "integer",
      id: "string",
      device: "string",
      library: "string",
    });
    if (!Number.isInteger(o.world) || o.world < 1) {
      throw invalidArgument(op, `options.world: expected an integer >= 1`);
    }
    if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.world) {
      throw invalidArgument(op, `options.rank: expected an integer in [0, ${o.world}), got ${o.rank}`);
    }
    const id = idBytes(op, o.id);
    const device = parseDevice(o.device ?? "cuda", op);
    if (device.type !== 1) {
      throw invalidArgument(op, `options.device: NCCL runs on CUDA devices, got ${device.name}`);
    }
    const nccl = load(op, o.library);
    // NVLink multicast stays off unless asked for (it reserves memory on every GPU of the node).
    try {
      if (Deno.env.get("NCCL_NVLS_ENABLE") === undefined) Deno.env.set("NCCL_NVLS_ENABLE", "0");
    } catch (e) {
      throw new AttnkitError(
        "INVALID_ARGUMENT",
        op,
        `setting NCCL_NVLS_ENABLE needs --allow-env (${(e as Error).message})`,
      );
    }
    unwrap(native().ak_cuda_set_current(device.index), op);
    const comm = new BigUint64Array(1);
    check(
      nccl,
      op,
      "ncclCommInitRank",
      nccl.ncclCommInitRank(new Uint8Array(comm.buffer), o.world, id, o.rank),
    );
    return new NcclGroup(
      nccl,
      Deno.UnsafePointer.create(comm[0]),
      o.rank,
      o.world,
      device.name,
      device.index,
    );
  }

  /** Every rank's float32 tensor stacked, `[world, ...shape]`, on this rank's GPU (stream-ordered). */
  allGather(tensor: Tensor): Promise<Tensor> {
    const op = "NcclGroup.allGather";
    try {
      if (this.#comm === null) throw invalidArgument(op, "the group was disposed");
      expectTensor(op, "tensor", tensor);
      if (tensor.dtype !== "float32") {
        throw invalidArgument(op, `tensor: expected float32, got ${tensor.dtype}`);
      }
      if (tensor.device !== this.device) {
        throw invalidArgument(op, `tensor: expected a tensor on ${this.device}, got one on ${tensor.device}`);
      }
      using send = tensor.clone(); // contiguous, and its own storage
      const out = Tensor.empty([this.world, ...tensor.shape], { device: this.device });
      if (send.numel > 0) {
        const stream = new BigUint64Array(1);
        unwrap(
          native().ak_cuda_stream(this.#index, new Uint8Array(stream.buffer)),
          op,
        );
        const status = this.#nccl.ncclAllGather(
          send.pointer,
          out.pointer,
          BigInt(send.numel),
          NCCL_FLOAT32,
          this.#comm,
          Deno.UnsafePointer.create(stream[0]),
        );
        if (status !== 0) out.dispose();
        check(this.#nccl, op, "ncclAllGather", status);
      }
      return Promise.resolve(out);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Leaves the group. */
  [Symbol.dispose](): void {
    if (this.#comm === null) return;
    this.#nccl.ncclCommDestroy(this.#comm);
    this.#comm = null;
  }
}
