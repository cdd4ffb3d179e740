/**
 * The layout a context-parallel call names (the recipes and the convolution history take the same
 * options): exactly one of a plan and a routing, and a group of its rank and world.
 *
 * @module
 */
import { invalidArgument } from "../../../ffi/errors.ts";
import { checkGroup, type Communicator } from "./communicator.ts";
import { ContextParallelPlan } from "./plan.ts";
import { ContextParallelRouting } from "./routing.ts";

/** A call's checked layout options. */
export interface LayoutChoice {
  plan?: ContextParallelPlan;
  routing?: ContextParallelRouting;
  /** Whichever of the two was given. */
  layout: ContextParallelPlan | ContextParallelRouting;
  group: Communicator;
}

/** Checks `options.plan` / `options.routing` (one of the two) and `options.group` against it. */
export function checkLayoutChoice(op: string, plan: unknown, routing: unknown, group: unknown): LayoutChoice {
  if ((plan === undefined) === (routing === undefined)) {
    throw invalidArgument(op, "options: expected a plan or a routing (one of the two)");
  }
  if (plan !== undefined && !(plan instanceof ContextParallelPlan)) {
    throw invalidArgument(
      op,
      "options.plan: expected a ContextParallelPlan (ContextParallelPlan.fromFragments)",
    );
  }
  if (routing !== undefined && !(routing instanceof ContextParallelRouting)) {
    throw invalidArgument(op, "options.routing: expected a ContextParallelRouting (plan.routing(device))");
  }
  const layout = (plan ?? routing) as ContextParallelPlan | ContextParallelRouting;
  return {
    plan: plan as ContextParallelPlan | undefined,
    routing: routing as ContextParallelRouting | undefined,
    layout,
    group: checkGroup(op, group, layout, plan ? "plan" : "routing"),
  };
}
