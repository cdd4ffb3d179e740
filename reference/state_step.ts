/**
 * One token's state algebra, as the recurrent oracles (the delta rules, KDA, the gated linear-attention
 * family) share it: the readout `o = scale S^T q`, and the delta rule's write of a token into the
 * decayed state S',
 *   r = v - S'^T k,  u = beta r,  S = S' + k u^T,
 * each beside its reverse. A state is `[K, V]` row-major; q and k are K long, v and o V long. The
 * reverses add into the gradients they are given (a `subarray` of a larger array serves), so that an
 * oracle keeps its own order of accumulation.
 *
 * @module
 */

/** The readout `o = scale S^T q` of state S. */
export function readOut(S: Float64Array, q: Float64Array, scale: number): Float64Array {
  const K = q.length, V = S.length / K;
  const o = new Float64Array(V);
  for (let c = 0; c < V; c++) {
    let acc = 0;
    for (let i = 0; i < K; i++) acc += S[i * V + c] * q[i];
    o[c] = scale * acc;
  }
  return o;
}

/** Reverse of {@link readOut} for the output gradient dO: adds `scale S dO` to dq and `scale q dO^T` to dS. */
export function readOutBackward(
  dS: Float64Array,
  S: Float64Array,
  q: Float64Array,
  dO: Float64Array,
  scale: number,
  dq: Float64Array,
): void {
  const K = q.length, V = dO.length;
  for (let i = 0; i < K; i++) {
    let acc = 0;
    for (let c = 0; c < V; c++) {
      acc += S[i * V + c] * dO[c];
      dS[i * V + c] += scale * q[i] * dO[c];
    }
    dq[i] += scale * acc;
  }
}

/** What {@link deltaWrite} wrote: the residual r = v - S'^T k and u = beta r. */
export interface DeltaWritten {
  r: Float64Array;
  u: Float64Array;
}

/** The delta write: S holds S' on entry and S' + k u^T on return. */
export function deltaWrite(S: Float64Array, k: Float64Array, v: Float64Array, beta: number): DeltaWritten {
  const K = k.length, V = v.length;
  const r = new Float64Array(V), u = new Float64Array(V);
  for (let c = 0; c < V; c++) {
    let p = 0;
    for (let i = 0; i < K; i++) p += S[i * V + c] * k[i];
    r[c] = v[c] - p;
    u[c] = beta * r[c];
  }
  for (let i = 0; i < K; i++) for (let c = 0; c < V; c++) S[i * V + c] += k[i] * u[c];
  return { r, u };
}

/**
 * Reverse of {@link deltaWrite} at S' (`decayed`, the state it was given) and what it wrote: dS, the
 * gradient of the state after the write, becomes that of S' (`dS - k dv^T`); `dS u - S' dv` is added to
 * dk; returns dv = beta dS^T k and dbeta = (dS^T k) . r.
 */
export function deltaWriteBackward(
  dS: Float64Array,
  decayed: Float64Array,
  k: Float64Array,
  { r, u }: DeltaWritten,
  beta: number,
  dk: Float64Array,
): { dv: Float64Array; dbeta: number } {
  const K = k.length, V = u.length;
  // S = S' + k u^T: du = dS^T k, dk += dS u.
  const du = new Float64Array(V);
  for (let i = 0; i < K; i++) {
    let acc = 0;
    for (let c = 0; c < V; c++) {
      du[c] += dS[i * V + c] * k[i];
      acc += dS[i * V + c] * u[c];
    }
    dk[i] += acc;
  }
  // u = beta r.
  let dbeta = 0;
  const dv = new Float64Array(V);
  for (let c = 0; c < V; c++) {
    dbeta += du[c] * r[c];
    dv[c] = beta * du[c];
  }
  // r = v - S'^T k: dS' = dS - k dv^T, dk -= S' dv.
  for (let i = 0; i < K; i++) {
    let acc = 0;
    for (let c = 0; c < V; c++) {
      dS[i * V + c] -= k[i] * dv[c];
      acc += decayed[i * V + c] * dv[c];
    }
    dk[i] -= acc;
  }
  return { dv, dbeta };
}
