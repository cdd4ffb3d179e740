// Fast backward, the two sequential stages: one block of 4 warps per sequence, value head and slice of
// VS = 64 or 32 state columns (32 when 64 would leave multiprocessors idle). The state slice lives in
// the warps' accumulators, warp w owning state rows w D/4 .. (w + 1) D/4 - 1.
//   states   h_c before each chunk (stored), v_new = u - w h (stored over u),
//            h <- e^gl h + K^T diag(e^(gl - gc)) v_new
//            (Seg: one job of the context-parallel passes, cuda_bwd_segments.cuh: a range of chunks
//            from a given start state, from the identity with u = 0, end state out)
//   dstates  dh_c after each chunk (stored), dv_new = diag(e^(gl - gc)) K dh + P^T dO (stored),
//            dh <- e^gl dh + (scale diag(e^gc) Q)^T dO - w^T dv_new; the last dh is d_initial_state
#pragma once

#include "cuda_bwd_elem.cuh"
#include "cuda_bwd_fast.cuh"
#include "cuda_bwd_mma.cuh"
#include "cuda_bwd_segments.cuh"

namespace ak::linear::cuda::bwd {
namespace states_detail {

constexpr int kC = kFastC;
constexpr int kThreads = 128;

// Chunk tiles of the forward state pass, double-buffered.
template <class T, int D, int VS>
struct StatesBuf {
  T W[kC * (D + 8)];
  T K[kC * (D + 8)];
  T U[kC * (VS + 8)];
  float gc[kC];
};

template <class T, int D, int VS, bool Seg = false>
__global__ void __launch_bounds__(kThreads) fast_states(Problem p, FastWork<T> w, SegParams sg) {
  constexpr int LD = D + 8, LV = VS + 8, MT = D / 64, NT = VS / 8;
  extern __shared__ __align__(16) unsigned char smraw[];
  StatesBuf<T, D, VS>* buf = reinterpret_cast<StatesBuf<T, D, VS>*>(smraw);
  T* hs = reinterpret_cast<T*>(buf + 2);  // [D][LV]

  // Block x = (sequence * jobs + job) * (D / VS) + slice (gridDim.z would cap the sequences at 65535);
  // one job per sequence in the plain run.
  const int jobs = Seg ? seg_jobs(sg.pass, sg.count) : 1;
  const int nj = blockIdx.x / (D / VS), n = nj / jobs;
  const int vs = (blockIdx.x % (D / VS)) * VS, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + kC - 1) / kC;
  const int64_t P = p.padded();
  const int hm0 = warp * (D / 4);  // first state row of this warp
  SegJob job;  // the plain run: all chunks, outputs, no end state
  if constexpr (Seg) {
    const int64_t nh = static_cast<int64_t>(n) * p.H + h;
    job = seg_job(sg, nj - n * jobs, nh, nch, D, p.initial_state != nullptr ? p.initial_state + nh * D * D : nullptr);
  } else {
    job.it1 = nch;
  }
  const int c_end = job.it1;
  const bool zero_u = job.identity, output = job.output;

  float hacc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = hm0 + 16 * mt + gq + (r >= 2 ? 8 : 0), e = vs + 8 * nt + 2 * q4 + (r & 1);
        if constexpr (Seg) {
          hacc[mt][nt][r] = seg_start_value(job, d, e, D);
        } else {
          hacc[mt][nt][r] = p.initial_state != nullptr
                                ? p.initial_state[((static_cast<int64_t>(n) * p.H + h) * D + d) * D + e]
                                : 0.f;
        }
      }

  auto load = [&](int c, StatesBuf<T, D, VS>& b) {
    const int gi = si.w + c, t0 = si.y + c * kC;
    const int len = min(kC, si.z - t0);
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
    tile_load<T>(b.W, LD, w.W + row * D, D, kC, kC, D, tid, kThreads);
    tile_load<T>(b.K, LD, static_cast<const T*>(p.k.p) + p.k.offset(si.x, t0, hk), p.k.st, kC, len, D, tid,
                 kThreads);
    if (!zero_u) tile_load<T>(b.U, LV, w.U + row * D + vs, D, kC, kC, VS, tid, kThreads);
    if (tid < kC / 4) cp_async16(b.gc + 4 * tid, w.gc + row + 4 * tid);
  };

  if (job.it0 < c_end) load(job.it0, buf[job.it0 & 1]);
  cp_async_commit();
  for (int c = job.it0; c < c_end; ++c) {
    StatesBuf<T, D, VS>& b = buf[c & 1];
    if (c + 1 < c_end) load(c + 1, buf[(c + 1) & 1]);
    cp_async_commit();
    cp_async_wait<1>();
    const int gi = si.w + c;
    const int64_t row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
    store_acc<T, MT, NT>(hacc, hs, LV, hm0, 0, lane);
    __syncthreads();
    if (output) {
      tile_store<T>(w.Hs + (static_cast<int64_t>(h) * p.NCt + gi) * D * D + vs, D, hs, LV, D, VS, tid,
                    kThreads);
    }

    // v_new = u - w h; the decayed copy feeds the state update.
    float uacc[1][NT][4];
    zero_acc(uacc);
    warp_mma<T, 1, NT, false, true>(uacc, b.W, LD, 16 * warp, hs, LV, 0, D, lane);
    const float gl = b.gc[kC - 1];
    // u is read in one pass and v_new written in another, each behind one uniform branch: per-element
    // branches on zero_u / output kept the compiler from batching the shared-memory loads.
    uint32_t vn[2][NT];
    if (zero_u) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) vn[half][nt] = 0u;
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          vn[half][nt] = *reinterpret_cast<const uint32_t*>(b.U + (16 * warp + gq + 8 * half) * LV + 8 * nt + 2 * q4);
        }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = 16 * warp + gq + 8 * half;
      const float dec = __expf(gl - b.gc[i]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 u2 = unpack2<T>(vn[half][nt]);
        const float x0 = u2.x - uacc[0][nt][2 * half], x1 = u2.y - uacc[0][nt][2 * half + 1];
        vn[half][nt] = pack2<T>(x0, x1);
        *reinterpret_cast<uint32_t*>(b.U + i * LV + 8 * nt + 2 * q4) = pack2<T>(x0 * dec, x1 * dec);
      }
    }
    if (output) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int i = 16 * warp + gq + 8 * half, e = 8 * nt + 2 * q4;
          *reinterpret_cast<uint32_t*>(w.U + (row + i) * D + vs + e) = vn[half][nt];
        }
    }
    __syncthreads();
    const float eg = __expf(gl);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) hacc[mt][nt][r] *= eg;
    warp_mma<T, MT, NT, true, true>(hacc, b.K, LD, hm0, b.U, LV, 0, kC, lane);
    __syncthreads();
  }
  // A segment's end state (fp32, for the combine).
  if (job.fin != nullptr) store_acc_f32<MT, NT>(hacc, job.fin, D, hm0, vs, lane);
}

// Per-chunk input tiles of the backward state pass.
template <class T, int D, int VS>
struct DStatesTiles {
  T P[kC * (kC + 8)];
  T dO[kC * (VS + 8)];
  T K[kC * (D + 8)];
  T Q[kC * (D + 8)];
  T W[kC * (D + 8)];
  float gc[kC];
};

// STAGES = 1: one set of tiles; the next chunk's K and P are fetched while the state update runs and
// two blocks share a multiprocessor to hide the rest. STAGES = 2 (few blocks, one per multiprocessor):
// the whole next chunk is fetched while this one is computed.
template <class T, int D, int VS, int STAGES>
struct DStatesSmem {
  DStatesTiles<T, D, VS> in[STAGES];
  T dh[D * (VS + 8)];
  T dU[kC * (VS + 8)];
  float qf[kC];  // scale e^gc per row of the chunk
};

template <class T, int D, int VS, int STAGES>
__global__ void __launch_bounds__(kThreads) fast_dstates(Problem p, FastWork<T> w) {
  constexpr int LD = D + 8, LV = VS + 8, LC = kC + 8, MT = D / 64, NT = VS / 8;
  extern __shared__ __align__(16) unsigned char smraw[];
  DStatesSmem<T, D, VS, STAGES>& sm = *reinterpret_cast<DStatesSmem<T, D, VS, STAGES>*>(smraw);

  // Block x = sequence * (D / VS) + slice (gridDim.z would cap the sequences at 65535).
  const int n = blockIdx.x / (D / VS), vs = (blockIdx.x % (D / VS)) * VS, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q4 = lane & 3;
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + kC - 1) / kC;
  const int64_t P = p.padded();
  const int hm0 = warp * (D / 4);
  const int64_t state_base = (static_cast<int64_t>(n) * p.H + h) * D * D;

  float dh[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = hm0 + 16 * mt + gq + (r >= 2 ? 8 : 0), e = vs + 8 * nt + 2 * q4 + (r & 1);
        dh[mt][nt][r] = p.d_final_state != nullptr ? p.d_final_state[state_base + d * D + e] : 0.f;
      }

  auto chunk_rows = [&](int c, int& len, int& t0, int64_t& row) {
    const int gi = si.w + c;
    t0 = si.y + c * kC;
    len = min(kC, si.z - t0);
    row = static_cast<int64_t>(h) * P + static_cast<int64_t>(gi) * kC;
  };
  auto load_kp = [&](int c, DStatesTiles<T, D, VS>& b) {
    int len, t0;
    int64_t row;
    chunk_rows(c, len, t0, row);
    tile_load<T>(b.K, LD, static_cast<const T*>(p.k.p) + p.k.offset(si.x, t0, hk), p.k.st, kC, len, D, tid,
                 kThreads);
    tile_load<T>(b.P, LC, w.P + row * kC, kC, kC, kC, kC, tid, kThreads);
  };
  auto load_rest = [&](int c, DStatesTiles<T, D, VS>& b) {
    int len, t0;
    int64_t row;
    chunk_rows(c, len, t0, row);
    tile_load<T>(b.Q, LD, static_cast<const T*>(p.q.p) + p.q.offset(si.x, t0, hk), p.q.st, kC, len, D, tid,
                 kThreads);
    tile_load<T>(b.W, LD, w.W + row * D, D, kC, kC, D, tid, kThreads);
    tile_load<T>(b.dO, LV, static_cast<const T*>(p.dout.p) + p.dout.offset(si.x, t0, h) + vs, p.dout.st, kC, len,
                 VS, tid, kThreads);
    if (tid < kC / 4) cp_async16(b.gc + 4 * tid, w.gc + row + 4 * tid);
  };

  if (nch > 0) {
    load_kp(nch - 1, sm.in[0]);
    load_rest(nch - 1, sm.in[0]);
  }
  cp_async_commit();
  for (int it = 0; it < nch; ++it) {
    const int c = nch - 1 - it;
    DStatesTiles<T, D, VS>& b = sm.in[STAGES == 2 ? (it & 1) : 0];
    int len, t0;
    int64_t row;
    chunk_rows(c, len, t0, row);
    if constexpr (STAGES == 2) {
      if (c > 0) {
        load_kp(c - 1, sm.in[(it + 1) & 1]);
        load_rest(c - 1, sm.in[(it + 1) & 1]);
      }
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const float gl = b.gc[kC - 1];
    if (tid < kC) sm.qf[tid] = p.scale * expf(b.gc[tid]);
    store_acc<T, MT, NT>(dh, sm.dh, LV, hm0, 0, lane);
    __syncthreads();
    tile_store<T>(w.dHs + (static_cast<int64_t>(h) * p.NCt + si.w + c) * D * D + vs, D, sm.dh, LV, D, VS, tid,
                  kThreads);
    // Q rows scaled by scale e^gc (Q serves only the state update, after the next barrier).
    for (int idx = tid; idx < kC * D / 2; idx += kThreads) {
      const int i = (2 * idx) / D, d = 2 * idx - i * D;
      uint32_t* qp = reinterpret_cast<uint32_t*>(b.Q + i * LD + d);
      const float f = sm.qf[i];
      const float2 qv = unpack2<T>(*qp);
      *qp = pack2<T>(qv.x * f, qv.y * f);
    }

    // dv_new = diag(e^(gl - gc)) K dh + P^T dO
    float uacc[1][NT][4];
    zero_acc(uacc);
    warp_mma<T, 1, NT, false, true>(uacc, b.K, LD, 16 * warp, sm.dh, LV, 0, D, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float dec = expf(gl - b.gc[16 * warp + gq + 8 * half]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        uacc[0][nt][2 * half] *= dec;
        uacc[0][nt][2 * half + 1] *= dec;
      }
    }
    warp_mma<T, 1, NT, true, true>(uacc, b.P, LC, 16 * warp, b.dO, LV, 0, kC, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = 16 * warp + gq + 8 * half;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int e = 8 * nt + 2 * q4;
        const uint32_t v = pack2<T>(uacc[0][nt][2 * half], uacc[0][nt][2 * half + 1]);
        *reinterpret_cast<uint32_t*>(w.dU + (row + i) * D + vs + e) = v;
        *reinterpret_cast<uint32_t*>(sm.dU + i * LV + e) = v;
      }
    }
    __syncthreads();
    if constexpr (STAGES == 1) {
      if (c > 0) load_kp(c - 1, b);
      cp_async_commit();
    }

    // dh <- e^gl dh + Q'^T dO - w^T dv_new
    const float eg = __expf(gl);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) dh[mt][nt][r] *= eg;
    warp_mma<T, MT, NT, true, true>(dh, b.Q, LD, hm0, b.dO, LV, 0, kC, lane);
    warp_mma<T, MT, NT, true, true, true>(dh, b.W, LD, hm0, sm.dU, LV, 0, kC, lane);
    __syncthreads();
    if constexpr (STAGES == 1) {
      if (c > 0) load_rest(c - 1, b);
      cp_async_commit();
    }
  }
  if (p.d_initial_state != nullptr) store_acc_f32<MT, NT>(dh, p.d_initial_state + state_base, D, hm0, vs, lane);
}

}  // namespace states_detail
}  // namespace ak::linear::cuda::bwd
