"""KDA's chunked algorithm in float64 numpy, forward and backward, for desk-checking the CUDA kernels'
decomposition without a GPU. The forward is the split the kernels run (csrc/linear/kda/cuda/prep.cuh, then
the state pass of csrc/linear/gla/cuda/pass.cuh); the backward is the chunked one planned for them:
recompute the prep's operands and the states, walk dS backwards, then each chunk's gradients through the
WY factors, the triangular solve and both causal score matrices. Checks:
  - forward: outputs and final state against the plain recurrence;
  - backward: the gradient of every input (q, k, v, gate, beta, initial state) along a random direction
    against a central finite difference of the plain recurrence's loss <dO, O> + <dS_T, S_T>.
Prints the relative errors for a few shapes (tails, several chunks, decays down to -5 with spikes).
Then, with every operand the kernels hold in 16 bits rounded to bf16 where they round it (the prep's
stored operands, Vn, dVn, the 16-bit states, A, dw and X in the backward's products, the outputs),
the relative RMS error of each result against the float64 run: what the kernels' tests should see.

    python3 tools/kda_chunk_emulate.py [seed]
"""
import sys

import numpy as np

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)


def bf16(x):
    """x rounded to bfloat16 (round to nearest even), as float64."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


R = lambda x: x  # the rounding of the kernels' 16-bit operands (bf16 in the second half of the run)


def recurrence(q, k, v, g, beta, s0, scale):
    """The plain recurrence: S <- diag(e^g) S; u = beta (v - S^T k); S += k u^T; o = scale S^T q."""
    S = s0.copy()
    o = np.zeros((q.shape[0], v.shape[1]))
    for t in range(q.shape[0]):
        S = np.exp(g[t])[:, None] * S
        u = beta[t] * (v[t] - S.T @ k[t])
        S = S + np.outer(k[t], u)
        o[t] = scale * S.T @ q[t]
    return o, S


def chunk_operands(q, k, v, g, beta, scale):
    """The prep kernel's per-chunk operands (one chunk, any length)."""
    n = q.shape[0]
    gc = np.cumsum(g, axis=0)
    E = np.exp(gc[:, None, :] - gc[None, :, :])  # E[i, j, c] = exp(gc_ic - gc_jc)
    strict = np.tril(np.ones((n, n)), -1)
    causal = np.tril(np.ones((n, n)))
    akk = np.einsum("ic,jc,ijc->ij", k, k, E) * strict
    p = scale * np.einsum("ic,jc,ijc->ij", q, k, E) * causal
    A = np.linalg.inv(np.eye(n) + beta[:, None] * akk)
    X = beta[:, None] * k * np.exp(gc)
    vb = beta[:, None] * v
    return dict(gc=gc, E=E, akk=akk, p=R(p), A=A, X=X, vb=vb, w=R(R(A) @ R(X)), u=R(R(A) @ R(vb)),
                qd=R(scale * q * np.exp(gc)), kd=R(k * np.exp(gc[-1] - gc)), el=np.exp(gc[-1]))


def chunked_forward(q, k, v, g, beta, s0, scale, C):
    T = q.shape[0]
    S = s0.copy()
    o = np.zeros((T, v.shape[1]))
    saved = []
    for t0 in range(0, T, C):
        sl = slice(t0, min(T, t0 + C))
        op = chunk_operands(q[sl], k[sl], v[sl], g[sl], beta[sl], scale)
        vn = R(op["u"] - op["w"] @ R(S))
        o[sl] = R(op["qd"] @ R(S) + op["p"] @ vn)
        saved.append((sl, op, R(S), vn))
        S = op["el"][:, None] * S + op["kd"].T @ vn
    return o, S, saved


def chunked_backward(q, k, v, g, beta, s0, scale, C, dO, dST):
    _, _, saved = chunked_forward(q, k, v, g, beta, s0, scale, C)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dg, dbeta = np.zeros_like(g), np.zeros_like(beta)
    dS = dST.copy()  # the gradient of the state after the chunk being processed
    for sl, op, S, vn in reversed(saved):
        do = dO[sl]
        n = do.shape[0]
        # The reverse state pass (per V tile on the GPU).
        dvn = R(op["p"].T @ do + op["kd"] @ R(dS))
        dS16 = R(dS)
        dqd = do @ S.T
        dP = (do @ vn.T) * np.tril(np.ones((n, n)))
        dkd = vn @ dS16.T
        d_el = (S * dS16).sum(1)
        dw = R(-dvn @ S.T)
        dS_prev = op["qd"].T @ do + op["el"][:, None] * dS - op["w"].T @ dvn
        # Per chunk: through the WY factors and the solve.
        A = op["A"]
        dA = dvn @ op["vb"].T + dw @ R(op["X"]).T
        dvb = R(A).T @ dvn
        dX = A.T @ dw
        dL = -(A.T @ dA @ A.T) * np.tril(np.ones((n, n)), -1)
        qc, kc, bc, gc, E = q[sl], k[sl], beta[sl], op["gc"], op["E"]
        db = (dL * op["akk"]).sum(1) + (v[sl] * dvb).sum(1) + (dX * kc * np.exp(gc)).sum(1)
        dakk = bc[:, None] * dL
        dv_c = bc[:, None] * dvb
        # Elementwise operands.
        dq_c = scale * dqd * np.exp(gc)
        dk_c = bc[:, None] * dX * np.exp(gc) + dkd * np.exp(gc[-1] - gc)
        dgc = dX * op["X"] + dqd * op["qd"] - dkd * op["kd"]
        dgL = (dkd * op["kd"]).sum(0) + d_el * op["el"]
        # The score matrices: P = scale q k^T with the decay (j <= i), Akk = k k^T with it (j < i).
        dq_p = scale * np.einsum("ij,jc,ijc->ic", dP, kc, E)
        dk_p = scale * np.einsum("ij,ic,ijc->jc", dP, qc, E)
        dk_row = np.einsum("ij,jc,ijc->ic", dakk, kc, E)
        dk_col = np.einsum("ij,ic,ijc->jc", dakk, kc, E)
        dq_c += dq_p
        dk_c += dk_p + dk_row + dk_col
        dgc += qc * dq_p - kc * dk_p + kc * dk_row - kc * dk_col
        dgc[-1] += dgL
        dq[sl], dk[sl], dv[sl], dbeta[sl] = dq_c, dk_c, dv_c, db
        dg[sl] = np.cumsum(dgc[::-1], axis=0)[::-1]  # gc = cumsum(g) within the chunk
        dS = dS_prev
    return dict(q=dq, k=dk, v=dv, g=dg, beta=dbeta, s0=dS)


def check(T, K, V, C, low, spike):
    q = rng.standard_normal((T, K))
    k = rng.standard_normal((T, K)) / np.sqrt(K)
    v = rng.standard_normal((T, V))
    g = rng.uniform(low, 0, (T, K))
    g[rng.random((T, K)) < 1 / 16] = spike
    beta = rng.random(T)
    s0 = rng.standard_normal((K, V)) * 0.5
    scale = K ** -0.5
    o_ref, s_ref = recurrence(q, k, v, g, beta, s0, scale)
    o, s, _ = chunked_forward(q, k, v, g, beta, s0, scale, C)
    rel = lambda a, b: np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
    out = [f"T={T} K={K} V={V} C={C} gates [{low}, 0] spikes {spike}: fwd o {rel(o, o_ref):.1e} S {rel(s, s_ref):.1e}"]
    dO = rng.standard_normal(o.shape)
    dST = rng.standard_normal(s.shape)
    grads = chunked_backward(q, k, v, g, beta, s0, scale, C, dO, dST)
    args = dict(q=q, k=k, v=v, g=g, beta=beta, s0=s0)

    def loss(a):
        o_, s_ = recurrence(a["q"], a["k"], a["v"], a["g"], a["beta"], a["s0"], scale)
        return (dO * o_).sum() + (dST * s_).sum()

    for name in args:
        d = rng.standard_normal(args[name].shape)
        h = 1e-5
        plus = dict(args, **{name: args[name] + h * d})
        minus = dict(args, **{name: args[name] - h * d})
        fd = (loss(plus) - loss(minus)) / (2 * h)
        an = (grads[name] * d).sum()
        out.append(f"d{name} {abs(an - fd) / max(abs(fd), 1e-12):.1e}")
    print("  ".join(out))


def rounding(T, K, V, low, spike):
    """Relative RMS errors of the bf16-operand run against the float64 one (inputs in bf16 for both)."""
    global R
    q = bf16(rng.standard_normal((T, K)))
    k = bf16(rng.standard_normal((T, K)) / np.sqrt(K))
    v = bf16(rng.standard_normal((T, V)))
    g = rng.uniform(low, 0, (T, K))
    g[rng.random((T, K)) < 1 / 16] = spike
    beta = rng.random(T)
    s0 = rng.standard_normal((K, V)) * 0.5
    dO, dST = bf16(rng.standard_normal((T, V))), rng.standard_normal((K, V))
    scale = K ** -0.5
    runs = []
    for rounding_fn in (lambda x: x, bf16):
        R = rounding_fn
        o, s, _ = chunked_forward(q, k, v, g, beta, s0, scale, 64)
        grads = chunked_backward(q, k, v, g, beta, s0, scale, 64, dO, dST)
        runs.append(dict(o=R(o), S=s, **{"d" + name: R(x) if name in "qkv" else x for name, x in grads.items()}))
    R = lambda x: x
    rms = lambda a, b: np.sqrt(((a - b) ** 2).mean() / max((b ** 2).mean(), 1e-300))
    print(f"bf16 operands, T={T} K={K} V={V} gates [{low}, 0] spikes {spike}: " +
          "  ".join(f"{name} {rms(runs[1][name], runs[0][name]):.1e}" for name in runs[0]))


if __name__ == "__main__":
    check(T=40, K=8, V=4, C=16, low=-0.5, spike=-0.5)
    check(T=37, K=6, V=5, C=16, low=-5.0, spike=-20.0)
    check(T=70, K=16, V=8, C=64, low=-1.0, spike=-5.0)
    check(T=1, K=4, V=3, C=16, low=-0.5, spike=-0.5)
    rounding(T=150, K=64, V=72, low=-5.0, spike=-20.0)
    rounding(T=77, K=16, V=8, low=-0.5, spike=-0.5)
    rounding(T=200, K=128, V=128, low=-5.0, spike=-20.0)
