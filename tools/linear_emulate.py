"""Block-level emulation of the fast chunked forward (csrc/linear/delta/fwd/prep.cuh and
state_mma.cuh) in numpy, for desk-checking without a GPU: the same warp roles, tile
ranges, masks, scalings and 16-bit roundings, with shared memory as NaN-filled arrays so a read of
anything no warp wrote shows up. Prints the relative RMS error of outputs and final states against
the plain recurrence in float64 for a few shapes (D = 64/128/256, tails, L2 norm, gated or not).
Keep it in step with the kernels when they change.

    python3 tools/linear_emulate.py [seed]
"""
import numpy as np, sys
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)

C = 64
def prep(k, v, g, beta, l2):
    # k, v: [len, D] (len <= 64), returns w, u [64, D], gc, rk [64], Aw, Au fp32 [64, 64]
    L_, D = k.shape
    kS = np.zeros((64, D)); kS[:L_] = k
    vS = np.zeros((64, D)); vS[:L_] = v
    gS = np.zeros(64); gS[:L_] = g
    bS = np.zeros(64); bS[:L_] = beta
    gc = np.cumsum(gS)
    rk = 1 / np.sqrt((kS**2).sum(1) + 1e-6) if l2 else np.ones(64)
    LA = np.full((64, 72), np.nan)
    for warp in range(8):
        rb, parity = warp & 3, warp >> 2
        for x in range(4):
            if x > rb: continue
            nt = parity + 2*x
            acc = kS[16*rb:16*rb+16] @ kS[8*nt:8*nt+8].T
            for a in range(16):
                for b in range(8):
                    i, j = 16*rb + a, 8*nt + b
                    LA[i, j] = bS[i]*rk[i]*rk[j]*np.exp(gc[i]-gc[j])*acc[a, b] if j < i else 0.0
    R = np.full((16, 72), np.nan)
    for w in range(4):
        Lb = LA[16*w:16*w+16, 16*w:16*w+16]
        for lane in range(16):
            x = np.zeros(16)
            for i in range(16):
                s = 1.0 if i == lane else 0.0
                for j in range(i): s -= Lb[i, j]*x[j]
                x[i] = s
            R[:16, 16*w + lane] = x
    for blk in range(4):
        LA[16*blk:16*blk+16, 16*blk:16*blk+16] = R[:16, 16*blk:16*blk+16]
    for I in range(1, 4):
        cols = 16*I
        Rn = np.full((16, 72), np.nan)
        for r in range(16):
            for cc in range(cols):
                J = cc >> 4
                s = 0.0
                for m in range(16*J, 16*I): s += LA[16*I + r, m]*LA[m, cc]
                Rn[r, cc] = s
        R = Rn
        for r in range(16):
            for cc in range(cols):
                s = 0.0
                for m in range(r + 1): s += LA[16*I + r, 16*I + m]*R[m, cc]
                LA[16*I + r, cc] = -s
    A = np.array([[LA[i, j] if j <= i else 0.0 for j in range(64)] for i in range(64)])
    assert not np.isnan(A).any(), "A read unwritten entries"
    au = A * bS[None, :]
    aw = au * np.exp(gc)[None, :]
    AwS = bf16(aw * rk[None, :]); AuS = bf16(au)
    w = np.zeros((64, D)); u = np.zeros((64, D))
    for warp in range(8):
        rb = warp & 3
        F, X, out = (AwS, kS, w) if warp < 4 else (AuS, vS, u)
        for kb in range(rb + 1):
            out[16*rb:16*rb+16] += F[16*rb:16*rb+16, 16*kb:16*kb+16] @ X[16*kb:16*kb+16]
    return bf16(w), bf16(u), gc, rk, aw, au

def state(q_chunks, k_chunks, lens, w_chunks, u_chunks, gc_chunks, rk_chunks, S0, scale, l2, D, VT, vt0):
    S = S0[:, vt0:vt0+VT].copy()
    RB3 = D // 32; CG3 = 8 // RB3
    outs = []
    for c in range(len(lens)):
        L_ = lens[c]
        qS = np.zeros((64, D)); qS[:L_] = q_chunks[c]
        kS = np.zeros((64, D)); kS[:L_] = k_chunks[c]
        wS = w_chunks[c]; uS = u_chunks[c][:, vt0:vt0+VT]
        gc = gc_chunks[c]; rk = rk_chunks[c] if l2 else np.ones(64)
        gL = gc[63]
        Sb = bf16(S)
        rqa = 1/np.sqrt((qS**2).sum(1) + 1e-6) if l2 else np.ones(64)
        PS = np.full((64, 64), np.nan)
        for warp in range(8):
            rb, parity = warp & 3, warp >> 2
            for x in range(rb + 1):
                nt = parity + 2*x
                acc = qS[16*rb:16*rb+16] @ kS[8*nt:8*nt+8].T
                for a in range(16):
                    for b in range(8):
                        i, j = 16*rb + a, 8*nt + b
                        PS[i, j] = bf16(scale*rqa[i]*rk[j]*np.exp(gc[i]-gc[j])*acc[a, b]) if j <= i else 0.0
        Ub = np.full((64, VT), np.nan); Ud = np.full((64, VT), np.nan)
        accs = {}; rqs = {}
        for warp in range(8):
            R1, c1 = warp >> 1, (warp & 1)*(VT//2)
            m1 = 32*(R1 & 1)
            src = wS if R1 < 2 else qS
            acc = src[m1:m1+32] @ Sb[:, c1:c1+VT//2]
            if R1 < 2:
                for a in range(32):
                    i = m1 + a
                    di = rk[i]*np.exp(gL - gc[i])
                    x = uS[i, c1:c1+VT//2] - acc[a]
                    Ub[i, c1:c1+VT//2] = bf16(x); Ud[i, c1:c1+VT//2] = bf16(x*di)
            else:
                for a in range(32):
                    acc[a] *= scale*rqa[m1 + a]*np.exp(gc[m1 + a])
            accs[warp] = acc
        O = np.full((64, VT), np.nan)
        for warp in range(4, 8):
            R1, c1 = warp >> 1, (warp & 1)*(VT//2)
            m1 = 32*(R1 & 1)
            acc = accs[warp]
            for mi in range(2):
                r16 = (m1 >> 4) + mi
                for kb16 in range(r16 + 1):
                    blkP = PS[16*r16:16*r16+16, 16*kb16:16*kb16+16]
                    assert not np.isnan(blkP).any(), "P read unwritten"
                    acc[16*mi:16*mi+16] += blkP @ Ub[16*kb16:16*kb16+16, c1:c1+VT//2]
            O[m1:m1+32, c1:c1+VT//2] = bf16(acc)
        assert not np.isnan(O).any()
        assert not np.isnan(Ub).any() and not np.isnan(Ud).any()
        Snew = np.full_like(S, np.nan)
        for warp in range(8):
            r3, c3 = 32*(warp // CG3), (warp % CG3)*(VT // CG3)
            Snew[r3:r3+32, c3:c3+VT//CG3] = np.exp(gL)*S[r3:r3+32, c3:c3+VT//CG3] + \
                bf16(kS[:, r3:r3+32]).T @ Ud[:, c3:c3+VT//CG3]
        assert not np.isnan(Snew).any()
        S = Snew
        outs.append(O[:L_])
    return np.concatenate(outs), S

def reference(q, k, v, g, beta, S0, scale, l2):
    S = S0.copy(); out = []
    for t in range(q.shape[0]):
        qt, kt = q[t], k[t]
        if l2:
            qt = qt/np.sqrt((qt**2).sum() + 1e-6); kt = kt/np.sqrt((kt**2).sum() + 1e-6)
        S = np.exp(g[t])*S
        u = beta[t]*(v[t] - S.T @ kt)
        S = S + np.outer(kt, u)
        out.append(scale*(S.T @ qt))
    return np.array(out), S

for D, VT, T, l2, gated in [(64, 32, 150, False, True), (64, 64, 64, True, True), (128, 64, 130, True, False),
                             (128, 128, 70, False, True), (256, 64, 65, True, True), (64, 32, 1, False, True)]:
    q = bf16(rng.standard_normal((T, D))); k = bf16(rng.standard_normal((T, D))); v = bf16(rng.standard_normal((T, D)))
    if not l2:
        q = bf16(q/np.linalg.norm(q, axis=1, keepdims=True)); k = bf16(k/np.linalg.norm(k, axis=1, keepdims=True))
    g = np.log(1/(1+np.exp(-rng.standard_normal(T)))) if gated else np.zeros(T)
    g = g.astype(np.float32).astype(np.float64)
    beta = 1/(1+np.exp(-rng.standard_normal(T)))
    S0 = rng.standard_normal((D, D))*0.1
    scale = D**-0.5
    nc = (T + 63)//64
    lens = [min(64, T - 64*c) for c in range(nc)]
    pre = [prep(k[64*c:64*c+lens[c]], v[64*c:64*c+lens[c]], g[64*c:64*c+lens[c]], beta[64*c:64*c+lens[c]], l2) for c in range(nc)]
    outs = []; Sfin = np.zeros((D, D))
    for vt0 in range(0, D, VT):
        o, S = state([q[64*c:64*c+lens[c]] for c in range(nc)], [k[64*c:64*c+lens[c]] for c in range(nc)], lens,
                     [p[0] for p in pre], [p[1] for p in pre], [p[2] for p in pre], [p[3] for p in pre],
                     S0, scale, l2, D, VT, vt0)
        outs.append(o); Sfin[:, vt0:vt0+VT] = S
    O = np.concatenate(outs, axis=1)
    Oref, Sref = reference(q, k, v, g, beta, S0, scale, l2)
    rel = lambda a, b: np.sqrt(((a-b)**2).mean()/(b**2).mean())
    print(f"D={D} VT={VT} T={T} l2={l2} gated={gated}: out relRMS {rel(O, Oref):.2e}, state relRMS {rel(Sfin, Sref):.2e}")
