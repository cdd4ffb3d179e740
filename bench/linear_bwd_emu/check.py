# Runs the emulated kernels (prep.sh builds them) on random inputs and compares every gradient with
# the float64 chunked model (model.py, itself checked against finite differences), by relative RMS.
# Usage: python3 check.py "case(B, T, H, HK, K, V, C, gated, l2norm, 'fast'|'general', 'bf16'|'f16'|'f32', cu=None)"
import numpy as np, subprocess, sys, os
HERE = os.path.dirname(os.path.abspath(__file__))
EMU = os.environ.get('EMU_DIR', '/tmp/ak-bwd-emu')
exec(open(os.path.join(HERE, 'model.py')).read().split("T,K,V,C=37")[0])

def bf16_round(x):
    x = np.asarray(x, np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    b = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)

def rnd(x, dt):
    if dt == 'bf16': return bf16_round(x)
    if dt == 'f16': return x.astype(np.float16).astype(np.float32)
    return x.astype(np.float32)

def case(B,T,H,HK,K,V,C,gated,l2,path,dt,cu=None,seed=0,dist='fla'):
    rng = np.random.default_rng(seed)
    d = f'{EMU}/run_{seed}'; os.makedirs(d, exist_ok=True)
    kscale = 1.0 if l2 else 1/np.sqrt(K)
    q = rnd(rng.standard_normal((B,T,HK,K)).astype(np.float32)*(1.0 if dist=='test' else kscale), dt)
    k = rnd(rng.standard_normal((B,T,HK,K)).astype(np.float32)*kscale, dt)
    v = rnd(rng.standard_normal((B,T,H,V)).astype(np.float32), dt)
    dO = rnd(rng.standard_normal((B,T,H,V)).astype(np.float32), dt)
    g = (-np.log1p(np.exp(-rng.standard_normal((B,T,H))))).astype(np.float32) if gated else np.zeros((B,T,H),np.float32)
    beta = (1/(1+np.exp(-rng.standard_normal((B,T,H))))).astype(np.float32)
    if dist == 'test':
        g = rng.uniform(-0.25, 0, (B,T,H)).astype(np.float32) if gated else g
        beta = rng.uniform(0, 1, (B,T,H)).astype(np.float32)
    N = B if cu is None else len(cu)-1
    S0 = rng.standard_normal((N,H,K,V)).astype(np.float32)*0.5
    dSf = rng.standard_normal((N,H,K,V)).astype(np.float32)*(1.0 if dist=='test' else 0.5)
    for name, a in [('q',q),('k',k),('v',v),('do',dO),('g',g),('beta',beta),('s0',S0),('dsf',dSf)]:
        a.astype(np.float32).tofile(f'{d}/{name}.bin')
    args = [f'{EMU}/emu', d, B,T,H,HK,K,V,C,int(gated),int(l2),path,dt,N] + (cu or [])
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode: print(r.stderr); return
    out = {n: np.fromfile(f'{d}/out_{n}.bin', np.float32) for n in ['dq','dk','dv','dbeta','dg','ds0']}
    # reference
    scale = K**-0.5
    rdq = np.zeros((B,T,HK,K)); rdk = np.zeros((B,T,HK,K)); rdv = np.zeros((B,T,H,V))
    rdb = np.zeros((B,T,H)); rdg = np.zeros((B,T,H)); rds0 = np.zeros((N,H,K,V))
    seqs = [(n,0,T) for n in range(B)] if cu is None else [(0,cu[n],cu[n+1]) for n in range(N)]
    grp = H//HK
    for n,(row,b0,e0) in enumerate(seqs):
        for h in range(H):
            hk = h//grp
            qq = q[row,b0:e0,hk].astype(np.float64); kk = k[row,b0:e0,hk].astype(np.float64)
            if l2:
                nq = np.sqrt((qq**2).sum(1,keepdims=True)+1e-6); nk = np.sqrt((kk**2).sum(1,keepdims=True)+1e-6)
                qh, kh = qq/nq, kk/nk
            else: qh, kh = qq, kk
            if e0 == b0:
                rds0[n,h] = dSf[n,h]; continue
            dq_,dk_,dv_,dg_,db_,ds_ = bwd_chunk(qh,kh,v[row,b0:e0,h].astype(np.float64),g[row,b0:e0,h].astype(np.float64),
                beta[row,b0:e0,h].astype(np.float64),S0[n,h].astype(np.float64),scale,dO[row,b0:e0,h].astype(np.float64),dSf[n,h].astype(np.float64),64)
            if l2:
                dq_ = (dq_ - qh*(qh*dq_).sum(1,keepdims=True))/nq
                dk_ = (dk_ - kh*(kh*dk_).sum(1,keepdims=True))/nk
            rdq[row,b0:e0,hk] += dq_; rdk[row,b0:e0,hk] += dk_; rdv[row,b0:e0,h] = dv_
            rdb[row,b0:e0,h] = db_; rdg[row,b0:e0,h] = dg_; rds0[n,h] = ds_
    res = []
    ok = True
    for name, ref in [('dq',rdq),('dk',rdk),('dv',rdv),('dbeta',rdb),('dg',rdg),('ds0',rds0)]:
        if name == 'dg' and not gated: continue
        o = out[name].reshape(ref.shape)
        if np.isnan(o).any(): res.append(f'{name} NaN@{np.argwhere(np.isnan(o))[0]}'); ok=False; continue
        e = np.sqrt(((o-ref)**2).sum()/max((ref**2).sum(),1e-30))
        tol = {'f32':1e-4}.get(dt, 0.008 if name in ('dq','dk','dv') else 0.02)
        if e > tol: ok = False
        res.append(f'{name} {e:.1e}')
    print(('ok  ' if ok else 'FAIL'), f'{path:7s} {dt} B{B} T{T} H{H}/{HK} K{K} V{V} C{C} g{int(gated)} l2{int(l2)} cu={cu}:', ' '.join(res), flush=True)

if __name__ == '__main__':
    exec(sys.argv[1])
