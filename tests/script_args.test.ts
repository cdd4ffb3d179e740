// The command line of the repository's scripts (tools/script_args.ts): a wrong flag or value ends the
// script with a line naming it and exit status 2, never a TypeError with a stack.
import assert from "node:assert/strict";
import { optionList, scriptArgs, ScriptUsageError, wholeNumber } from "../tools/script_args.ts";

const OPTIONS = {
  calls: { type: "string", default: "10" },
  quiet: { type: "boolean" },
  only: { type: "string", multiple: true },
} as const;

Deno.test("script args: values parse as node:util's parseArgs parses them", () => {
  const { values } = scriptArgs({
    args: ["--calls", "5", "--quiet", "--only", "a", "--only", "b"],
    options: OPTIONS,
  });
  assert.deepEqual({ ...values }, { calls: "5", quiet: true, only: ["a", "b"] });
});

Deno.test("script args: an unknown flag or a missing value is a ScriptUsageError naming the flag", () => {
  const cases: [string[], string][] = [[["--cals", "5"], "--cals"], [["--calls"], "--calls"], [
    ["extra"],
    "extra",
  ]];
  for (const [args, flag] of cases) {
    assert.throws(() => scriptArgs({ args, options: OPTIONS }, false), (e: unknown) => {
      assert.ok(e instanceof ScriptUsageError, `${args}: ${e}`);
      assert.match(e.message, new RegExp(flag));
      return true;
    });
  }
});

Deno.test("script args: the option list names every flag, its value and default", () => {
  assert.equal(
    optionList({ options: OPTIONS }),
    'options:\n  --calls <calls>  (default "10")\n  --quiet\n  --only <only> (repeatable)',
  );
  assert.equal(optionList({}), "takes no options");
});

Deno.test("script args: whole numbers are read strictly", () => {
  assert.equal(wholeNumber("--calls", "12"), 12);
  assert.equal(wholeNumber("--seed", "0", 0), 0);
  for (const bad of ["abc", "1.5", "", "-3", "1e3", "0", "99999999999999999999"]) {
    assert.throws(() => wholeNumber("--calls", bad), (e: unknown) => {
      assert.ok(e instanceof ScriptUsageError);
      assert.equal(e.message, `--calls: expected a whole number of at least 1, got "${bad}"`);
      return true;
    });
  }
});

Deno.test("script args: the fuzz runner answers a wrong command line with one line and exit 2", async () => {
  const runner = new URL("./fuzz/run.ts", import.meta.url).pathname;
  const cases: [string[], RegExp][] = [
    [["--bogus"], /run\.ts: Unknown option '--bogus'\noptions:\n {2}--device <device>/],
    [["--calls", "many"], /run\.ts: --calls: expected a whole number of at least 1, got "many"\n$/],
    [["--device", "gpu"], /run\.ts: --device: expected "cpu" or "cuda", got "gpu"\n$/],
  ];
  for (const [args, expected] of cases) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", runner, ...args],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, `${args.join(" ")}: ${stderr}`);
    assert.match(stderr, expected);
    assert.doesNotMatch(stderr, /TypeError|\n\s+at /);
  }
});
