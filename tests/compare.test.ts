// compare() and assertClose(): the numbers they report, and that they fail when they should: NaN
// never passes, non-finite patterns must match, and a failure message points at the element.
//
// Tolerance rule: the measurements are checked against values computed by hand for small inputs
// (exact in float64, or within 1e-15 relative where a square root is involved).
import assert from "node:assert/strict";
import { assertClose, AttnkitError, compare, Tensor, ToleranceError } from "../mod.ts";
import { deviceTest } from "./helpers.ts";

const near = (a: number, b: number) => Math.abs(a - b) <= 1e-15 * Math.max(1, Math.abs(b));

deviceTest("compare measures max abs, RMS, relative RMS, the worst element and NaNs", (device) => {
  using actual = Tensor.from([1, 2, 3.5, 4], { dtype: "float64", device });
  const c = compare(actual, [1, 2, 3, 5]);
  assert.equal(c.count, 4);
  assert.equal(c.maxAbs, 1);
  assert.equal(c.worstIndex, 3);
  assert.equal(c.worstActual, 4);
  assert.equal(c.worstExpected, 5);
  assert.ok(near(c.rms, Math.sqrt((0.25 + 1) / 4)));
  assert.ok(near(c.refRms, Math.sqrt((1 + 4 + 9 + 25) / 4)));
  assert.ok(near(c.relRms, Math.sqrt(1.25 / 39)));
  assert.equal(c.nanCount, 0);
  assert.equal(c.nonFiniteMismatches, 0);
  assert.equal(c.firstNonFiniteMismatch, -1);

  const exact = compare([0, 0], [0, 0]);
  assert.equal(exact.relRms, 0);
  assert.equal(exact.maxAbs, 0);
  assert.equal(compare([1e-9], [0]).relRms, Infinity);

  using withNaN = Tensor.from([NaN, 1, Infinity, -Infinity, 2], { device });
  const n = compare(withNaN, [NaN, NaN, Infinity, Infinity, 2]);
  assert.equal(n.nanCount, 1);
  assert.equal(n.nonFiniteMismatches, 2); // 1 vs NaN, -inf vs inf
  assert.equal(n.firstNonFiniteMismatch, 1);
  assert.equal(n.maxAbs, 0); // only the finite pair counts
});

deviceTest("compare reads every dtype, and tensors against tensors", (device) => {
  for (const dtype of ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"] as const) {
    using a = Tensor.from([0, 1, 1, 0], { dtype, device });
    using b = Tensor.from([0, 1, 0, 0], { dtype: "float64", device: "cpu" });
    const c = compare(a, b);
    assert.equal(c.maxAbs, 1, dtype);
    assert.equal(c.worstIndex, 2, dtype);
  }
  assert.equal(compare(new BigInt64Array([5n, 7n]), [5, 8]).maxAbs, 1);
});

deviceTest("assertClose passes within every tolerance kind and returns the comparison", (device) => {
  using out = Tensor.from([1.0005, 2, -3], { dtype: "float64", device });
  const c = assertClose(out, [1, 2, -3], { atol: 1e-3, name: "output" });
  assert.ok(near(c.maxAbs, 0.0005));
  assertClose(out, [1, 2, -3], { rtol: 6e-4 });
  assertClose(out, [1, 2, -3], { relRms: 1e-3, maxAbs: 1e-3 });
  assertClose([NaN, Infinity, 1], [NaN, Infinity, 1], { maxAbs: 0 }); // matching non-finite patterns pass
});

deviceTest("assertClose fails with a message that names the tensor, the bound and the element", (device) => {
  using out = Tensor.from([[1, 2], [3, 4.5]], { dtype: "float64", device });
  assert.throws(
    () => assertClose(out, [1, 2, 3, 4], { atol: 0.1, name: "o" }),
    (e: unknown) => {
      assert.ok(e instanceof ToleranceError);
      assert.match(
        e.message,
        /^o: 1 element\(s\) outside atol 0\.1 \+ rtol 0; worst at \[1, 1\]: got 4\.5, expected 4/,
      );
      assert.match(e.message, /largest difference at \[1, 1\]/);
      assert.equal(e.comparison.worstIndex, 3);
      return true;
    },
  );
  assert.throws(
    () => assertClose(out, [1, 2, 3, 4], { relRms: 1e-3 }),
    /relative RMS error .* exceeds 0\.001/,
  );
  assert.throws(
    () => assertClose(out, [1, 2, 3, 4], { maxAbs: 0.4 }),
    /max abs error 5\.000e-1 exceeds 0\.4/,
  );
  assert.throws(() => assertClose(out, [1, 2, 3, 4], { rtol: 0.1 }), /outside atol 0 \+ rtol 0\.1/);
});

deviceTest("NaN never passes, whatever the tolerance", (device) => {
  using out = Tensor.full([4], NaN, { device });
  for (const tol of [{ atol: 1e9 }, { rtol: 1e9 }, { relRms: 1e9 }, { maxAbs: 1e9 }]) {
    assert.throws(() => assertClose(out, [1, 2, 3, 4], tol), (e: unknown) => {
      assert.ok(e instanceof ToleranceError);
      assert.match(
        e.message,
        /4 element\(s\) differ in non-finite pattern, first at \[0\]: got NaN, expected 1/,
      );
      assert.equal(e.comparison.nanCount, 4);
      return true;
    });
  }
  using partly = Tensor.from([1, NaN, 3], { device });
  assert.throws(() => assertClose(partly, [1, 2, 3], { atol: 1 }), /first at \[1\]: got NaN/);
  // an infinity where the reference is finite, or the wrong sign of infinity, fails too
  assert.throws(() => assertClose([1, Infinity], [1, 2], { atol: 1e300 }), /non-finite pattern/);
  assert.throws(() => assertClose([-Infinity], [Infinity], { atol: 1e300 }), /non-finite pattern/);
  // and a reference NaN is not matched by a number
  assert.throws(() => assertClose([0], [NaN], { atol: 1e300 }), /got 0, expected NaN/);
});

deviceTest("mismatched inputs and missing tolerances are argument errors", (device) => {
  using a = Tensor.zeros([2, 3], { device });
  using b = Tensor.zeros([3, 2], { device });
  const isArgError = (pattern: RegExp) => (e: unknown) => {
    assert.ok(e instanceof AttnkitError);
    assert.equal(e.code, "INVALID_ARGUMENT");
    assert.match(e.message, pattern);
    return true;
  };
  assert.throws(
    () => compare(a, b),
    isArgError(/compare: expected: shape \[3, 2\] differs from actual \[2, 3\]/),
  );
  assert.throws(() => compare(a, [1, 2]), isArgError(/expected: has 2 elements, actual has 6/));
  assert.throws(() => assertClose(a, new Array(6).fill(0), {}), isArgError(/tol: give at least one of/));
  assert.throws(
    () => assertClose(a, new Array(6).fill(0), { name: "x" }),
    isArgError(/tol: give at least one/),
  );
  assertClose(a, new Array(6).fill(0), { maxAbs: 0 }); // a flat array of the right size is fine
});
