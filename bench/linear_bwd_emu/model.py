# The chunked backward of the (gated) delta rule in float64 (bench/NOTES_linear_bwd.md), checked against
# central finite differences of the token recurrence when run as a script.
import numpy as np
rng = np.random.default_rng(0)

def fwd_rec(q,k,v,g,beta,S0,scale):
    T,K = q.shape; V = v.shape[1]
    S = S0.copy(); O = np.zeros((T,V))
    for t in range(T):
        S = np.exp(g[t])*S
        u = beta[t]*(v[t] - S.T@k[t])
        S = S + np.outer(k[t],u)
        O[t] = S.T@(scale*q[t])
    return O,S

def bwd_chunk(q,k,v,g,beta,S0,scale,dO,dSf,C):
    T,K = q.shape; V = v.shape[1]
    NC = (T+C-1)//C
    ch = []
    for c in range(NC):
        s,e = c*C, min(T,(c+1)*C); n=e-s
        Q,Kc,Vc,b = q[s:e],k[s:e],v[s:e],beta[s:e]
        gc = np.cumsum(g[s:e]); G=np.exp(gc)
        D = np.exp(gc[:,None]-gc[None,:])
        KK = Kc@Kc.T
        L = np.tril(b[:,None]*KK*D,-1)
        A = np.linalg.inv(np.eye(n)+L)
        w = A@((b*G)[:,None]*Kc); u = A@(b[:,None]*Vc)
        ch.append(dict(s=s,e=e,gc=gc,G=G,D=D,KK=KK,L=L,A=A,w=w,u=u))
    h = S0.copy(); Hs=[];Us=[]
    for c,x in enumerate(ch):
        Hs.append(h.copy()); U = x['u']-x['w']@h; Us.append(U)
        gl = x['gc'][-1]
        h = np.exp(gl)*h + Kc_(k,x).T@(np.exp(gl-x['gc'])[:,None]*U)
    dh = dSf.copy(); DH=[None]*NC; dUs=[None]*NC
    for c in reversed(range(NC)):
        x=ch[c]; s,e=x['s'],x['e']; Q=q[s:e];Kc=k[s:e]; gl=x['gc'][-1]
        DH[c]=dh.copy()
        M = np.tril(np.ones((e-s,e-s)))
        P = scale*(Q@Kc.T)*x['D']*M
        dU = P.T@dO[s:e] + (np.exp(gl-x['gc'])[:,None]*Kc)@dh
        dUs[c]=dU
        dh = np.exp(gl)*dh + scale*Q.T@(x['G'][:,None]*dO[s:e]) - x['w'].T@dU
    dS0 = dh
    dq=np.zeros_like(q);dk=np.zeros_like(k);dv=np.zeros_like(v);db=np.zeros_like(beta);dg=np.zeros_like(g)
    for c,x in enumerate(ch):
        s,e=x['s'],x['e']; n=e-s; Q=q[s:e];Kc=k[s:e];Vc=v[s:e];b=beta[s:e];G=x['G'];gc=x['gc'];gl=gc[-1]
        h=Hs[c]; dhp=DH[c]; U=Us[c]; dU=dUs[c]; dOc=dO[s:e]; A=x['A']
        M = np.tril(np.ones((n,n)))
        dPs = scale*(dOc@U.T)*x['D']*M
        dQ = scale*G[:,None]*(dOc@h.T) + dPs@Kc
        dKt = (np.exp(gl-gc)[:,None]*U)@dhp.T
        dK = dPs.T@Q + dKt
        dgc = np.sum(Q*dQ,1) - np.sum(Kc*dK,1)
        dgc[-1] += np.sum(Kc*dKt) + np.exp(gl)*np.sum(h*dhp)
        dw = -dU@h.T; du = dU
        dA = du@(b[:,None]*Vc).T + dw@((b*G)[:,None]*Kc).T
        Atdu = A.T@du; Atdw = A.T@dw
        dV = b[:,None]*Atdu
        dK += (b*G)[:,None]*Atdw
        dbeta = np.sum(Atdu*Vc,1) + G*np.sum(Atdw*Kc,1)
        dgc += b*G*np.sum(Atdw*Kc,1)
        dL = np.tril(-A.T@dA@A.T,-1)
        dbeta += np.sum(dL*x['KK']*x['D'],1)
        dMm = dL*b[:,None]*x['D']
        dK += dMm@Kc + dMm.T@Kc
        LdL = dL*x['L']
        dgc += LdL.sum(1) - LdL.sum(0)
        dgl = np.cumsum(dgc[::-1])[::-1]
        dq[s:e]=dQ;dk[s:e]=dK;dv[s:e]=dV;db[s:e]=dbeta;dg[s:e]=dgl
    return dq,dk,dv,dg,db,dS0

def Kc_(k,x): return k[x['s']:x['e']]

T,K,V,C=37,5,4,8
q=rng.standard_normal((T,K));k=rng.standard_normal((T,K))*0.4;v=rng.standard_normal((T,V))
g=np.log(1/(1+np.exp(-rng.standard_normal(T))));beta=1/(1+np.exp(-rng.standard_normal(T)))
S0=rng.standard_normal((K,V));scale=K**-0.5
dO=rng.standard_normal((T,V));dSf=rng.standard_normal((K,V))
def loss(q,k,v,g,beta,S0):
    O,S=fwd_rec(q,k,v,g,beta,S0,scale); return np.sum(O*dO)+np.sum(S*dSf)
grads = bwd_chunk(q,k,v,g,beta,S0,scale,dO,dSf,C)
args=[q,k,v,g,beta,S0]
for ai,(a,gr) in enumerate(zip(args,grads)):
    num=np.zeros_like(a); eps=1e-6
    it=np.nditer(a,flags=['multi_index'])
    for _ in it:
        idx=it.multi_index
        ap=[x.copy() for x in args]; am=[x.copy() for x in args]
        ap[ai][idx]+=eps; am[ai][idx]-=eps
        num[idx]=(loss(*ap)-loss(*am))/(2*eps)
    print(['dq', 'dk', 'dv', 'dg', 'dbeta', 'dS0'][ai], 'max relative error vs finite differences:', np.abs(num-gr).max()/np.abs(num).max())
