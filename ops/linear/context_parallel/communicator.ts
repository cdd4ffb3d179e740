/**
 * The collective the context-parallel recipe needs: an all-gather of one tensor per rank. A
 * `Communicator` is one rank's end of a group; `SimulatedGroup` keeps every rank in this process (each
 * rank's calls are promises that settle when all ranks have called), for tests and for trying a
 * layout on one device or the CPU.
 *
 * @module
 */
import { AttnkitError, invalidArgument } from "../../../ffi/errors.ts";
import { expectTensor } from "../../checks.ts";
import { Tensor } from "../../tensor.ts";

/** One rank's end of a group of ranks. */
export interface Communicator {
  /** This rank, in `[0, world)`. */
  readonly rank: number;
  /** Ranks in the group. */
  readonly world: number;
  /**
   * Every rank's tensor stacked along a new first dim, `[world, ...shape]`, on this rank's device.
   * Every rank calls it, the same number of times, with tensors of one shape and dtype.
   */
  allGather(tensor: Tensor): Promise<Tensor>;
}

/**
 * Checks that `group` is a communicator of the layout's rank and world (`what` names the layout:
 * "plan" or "routing").
 */
export function checkGroup(
  op: string,
  group: unknown,
  layout: { world: number; cpRank: number },
  what: string,
): Communicator {
  const g = group as Communicator | undefined;
  if (!g || typeof g.allGather !== "function") {
    throw invalidArgument(op, "options.group: expected a Communicator { rank, world, allGather }");
  }
  if (g.world !== layout.world || g.rank !== layout.cpRank) {
    throw invalidArgument(
      op,
      `options.group: rank ${g.rank} of ${g.world}, but the ${what} is rank ${layout.cpRank} of ${layout.world}`,
    );
  }
  return g;
}

interface Round {
  parts: (Float32Array | undefined)[];
  shape: readonly number[];
  dtype: string;
  /** Set when two ranks disagreed: every rank's call of this round fails with it, late ones too. */
  error?: AttnkitError;
  waiting: { rank: number; device: string; settle: (t: Tensor) => void; fail: (e: unknown) => void }[];
}

/**
 * A group whose ranks live in this process, for tests and single-device runs: `SimulatedGroup.create(n)`
 * gives n communicators; run each rank's calls concurrently (`Promise.all`). Tensors pass through the
 * host, so it measures nothing about communication.
 *
 * @example
 * ```ts
 * import { SimulatedGroup, Tensor } from "@attnkit/attnkit";
 * const ranks = SimulatedGroup.create(2);
 * const gathered = await Promise.all(ranks.map((c) => c.allGather(Tensor.full([3], c.rank))));
 * console.log(gathered[0].shape); // [2, 3]
 * ```
 */
export class SimulatedGroup {
  readonly #rounds: Round[] = [];
  readonly #calls: number[];

  private constructor(readonly world: number) {
    this.#calls = new Array(world).fill(0);
  }

  /** The communicators of a new group of `world` ranks. */
  static create(world: number): Communicator[] {
    if (!Number.isInteger(world) || world < 1) {
      throw invalidArgument("SimulatedGroup.create", `world: expected an integer >= 1, got ${world}`);
    }
    const group = new SimulatedGroup(world);
    return Array.from({ length: world }, (_, rank) => ({
      rank,
      world,
      allGather: (t: Tensor) => group.#allGather(rank, t),
    }));
  }

  #allGather(rank: number, tensor: Tensor): Promise<Tensor> {
    const op = "Communicator.allGather";
    expectTensor(op, "tensor", tensor);
    if (tensor.dtype !== "float32") {
      throw invalidArgument(op, `tensor: expected float32, got ${tensor.dtype}`);
    }
    const index = this.#calls[rank]++;
    const round = this.#rounds[index] ??= {
      parts: new Array(this.world).fill(undefined),
      shape: tensor.shape,
      dtype: tensor.dtype,
      waiting: [],
    };
    return new Promise<Tensor>((settle, fail) => {
      if (!round.error && round.shape.join() !== tensor.shape.join()) {
        round.error = invalidArgument(
          op,
          `tensor: rank ${rank} gave [${tensor.shape}] where another rank gave [${round.shape}] (call ${index})`,
        );
        for (const w of round.waiting) w.fail(round.error);
        round.waiting = [];
      }
      if (round.error) {
        fail(round.error);
        return;
      }
      round.parts[rank] = tensor.toArray() as Float32Array;
      round.waiting.push({ rank, device: tensor.device, settle, fail });
      if (round.waiting.length < this.world) return;
      const size = round.parts[0]!.length;
      const all = new Float32Array(size * this.world);
      round.parts.forEach((p, r) => all.set(p!, r * size));
      for (const w of round.waiting) {
        try {
          w.settle(Tensor.from(all, { shape: [this.world, ...round.shape], device: w.device }));
        } catch (e) {
          w.fail(e instanceof AttnkitError ? e : invalidArgument(op, String(e)));
        }
      }
      delete this.#rounds[index];
    });
  }
}
