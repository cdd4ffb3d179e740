# Which bf16 rounding points of the fast path cost how much accuracy: the fast path's data flow in
# float64 with bf16 rounding switched on at named points, against the exact chunked model.
import numpy as np, os
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'model.py')).read().split("T,K,V,C=37")[0])
def bf(x):
    x = np.asarray(x, np.float32); b = x.view(np.uint32).astype(np.uint64)
    b = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)
def fast_bwd(q,k,v,g,beta,S0,scale,dO,dSf,C,R):
    # R: set of rounding points enabled
    r = lambda name, x: bf(x) if name in R else x
    T,K = q.shape; V = v.shape[1]; NC=(T+C-1)//C
    ch=[]
    for c in range(NC):
        s,e=c*C,min(T,(c+1)*C); Q,Kc,Vc,b=q[s:e],k[s:e],v[s:e],beta[s:e]
        gc=np.cumsum(g[s:e]); G=np.exp(gc); D=np.exp(gc[:,None]-gc[None,:]); n=e-s
        L=np.tril(b[:,None]*(Kc@Kc.T)*D,-1); A=np.linalg.inv(np.eye(n)+L)
        Ar=r('A',A)
        w=r('w', Ar@r('bk',(b*G)[:,None]*Kc)); u=r('u', Ar@r('bk',b[:,None]*Vc))
        P=r('P', scale*(Q@Kc.T)*D*np.tril(np.ones((n,n))))
        ch.append(dict(s=s,e=e,gc=gc,G=G,D=D,A=A,Ar=Ar,w=w,u=u,P=P))
    h=S0.copy(); Hs=[];Us=[]
    for x in ch:
        hr=r('h',h); Hs.append(hr); U=x['u']-x['w']@hr; Us.append(r('U',U)); gl=x['gc'][-1]
        h=np.exp(gl)*h + k[x['s']:x['e']].T@r('Ut',np.exp(gl-x['gc'])[:,None]*U)
    dh=dSf.copy(); DH=[None]*NC; dUs=[None]*NC
    for c in reversed(range(NC)):
        x=ch[c]; s,e=x['s'],x['e']; Q=q[s:e]; Kc=k[s:e]; gl=x['gc'][-1]
        dhr=r('dh',dh); DH[c]=dhr
        dU=r('dU', x['P'].T@dO[s:e] + np.exp(gl-x['gc'])[:,None]*(Kc@dhr)); dUs[c]=dU
        dh=np.exp(gl)*dh + r('Qs',scale*x['G'][:,None]*Q).T@dO[s:e] - x['w'].T@dU
    dS0=dh
    dq=np.zeros_like(q);dk=np.zeros_like(k);dv=np.zeros_like(v);db=np.zeros_like(beta);dg=np.zeros_like(g)
    for c,x in enumerate(ch):
        s,e=x['s'],x['e'];n=e-s;Q=q[s:e];Kc=k[s:e];Vc=v[s:e];b=beta[s:e];G=x['G'];gc=x['gc'];gl=gc[-1]
        h=Hs[c];dhp=DH[c];U=Us[c];dU=dUs[c];dOc=dO[s:e];A=x['Ar']
        M=np.tril(np.ones((n,n)))
        dPs=r('dPs',scale*(dOc@U.T)*x['D']*M)
        dQ=scale*G[:,None]*(dOc@h.T)+dPs@Kc
        dKt=(np.exp(gl-gc)[:,None]*U)@dhp.T
        dK=dPs.T@Q+dKt
        dgc=np.sum(Q*dQ,1)-np.sum(Kc*dK,1)
        dgc[-1]+=np.sum(Kc*dKt)+np.exp(gl)*np.sum(h*dhp)
        dw=r('dw',-dU@h.T)
        Atdu=A.T@dU; Atdw=A.T@dw
        dA=r('dA',np.tril(dU@(b[:,None]*Vc).T+dw@((b*G)[:,None]*Kc).T,-1))
        dV=b[:,None]*Atdu; dK+=(b*G)[:,None]*Atdw
        dbeta=np.sum(Atdu*Vc,1)+G*np.sum(Atdw*Kc,1); dgc+=b*G*np.sum(Atdw*Kc,1)
        X=r('X',dA@A.T)
        dL=np.tril(-A.T@X,-1)
        KK=Kc@Kc.T; dbeta+=np.sum(dL*KK*x['D'],1)
        dMm=dL*b[:,None]*x['D']; S=r('S',dMm+dMm.T); dK+=S@Kc
        Lm=np.tril(b[:,None]*KK*x['D'],-1); LdL=dL*Lm; dgc+=LdL.sum(1)-LdL.sum(0)
        dq[s:e]=dQ;dk[s:e]=dK;dv[s:e]=dV;db[s:e]=dbeta;dg[s:e]=np.cumsum(dgc[::-1])[::-1]
    return dq,dk,dv,dg,db,dS0
rng=np.random.default_rng(12)
T,K,V,C=512,64,64,64
q=bf(rng.standard_normal((T,K)));k=bf(rng.standard_normal((T,K))*K**-0.5);v=bf(rng.standard_normal((T,V)))
g=np.zeros(T) ;beta=rng.uniform(0,1,T);S0=rng.standard_normal((K,V))*0.5;dO=bf(rng.standard_normal((T,V)));dSf=rng.standard_normal((K,V))
ref=bwd_chunk(q,k,v,g,beta,S0,K**-0.5,dO,dSf,C)
ALL={'A','w','u','bk','P','h','U','Ut','dh','dU','Qs','dPs','dw','dA','X','S'}
def err(R):
    out=fast_bwd(q,k,v,g,beta,S0,K**-0.5,dO,dSf,C,R)
    return ' '.join(f'{n} {np.sqrt(((o-r)**2).sum()/(r**2).sum()):.1e}' for n,o,r in zip(['dq','dk','dv','dg','db','ds0'],out,ref) if n!='dg')
print('all   ', err(ALL))
for p in sorted(ALL):
    print(f'only {p:4s}', err({p}))
