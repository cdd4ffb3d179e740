// The dstates stage (dstates.cuh's recurrence, chunks from the last to the first) with the state gradient's
// dependent chain on one warpgroup and everything else on another, as the forward's split kernel does:
//   warpgroup 0, the chain (dh, D x VS fp32, in registers), per chunk:
//     Y = P^T dO and X = Q^T dOs, issued first (no dh in them), then dh to 16 bits (Dh), U = K Dh,
//     -dv_new = -(e^(gl - gc) U + Y) to 16 bits, dh <- e^gl dh + X + W^T (-dv_new).
//   warpgroup 1, the helper: the loads (cp.async into two slots), dOs = diag(scale e^gc) dO (the query
//     factors on dO's rows instead of Q's), and the chain's by-products to HBM: dHs from Dh, dv_new (the
//     sign restored, exactly) from -dv_new.
// The 16-bit roundings are dstates.cuh's (dh, dv_new and one scaled operand); the summation order differs.
// Hand-offs are named barriers with arrive (producer) / sync (consumer) pairs, each id alternating.
#pragma once

#include "linear/delta/bwd/fast.cuh"
#include "linear/delta/fwd/state_sm90_parts.cuh"
#include "generated/linear_launchers.h"

namespace ak::linear::cuda::bwd {
namespace dstates_split_detail {

using fwd::StateCoords;

// Named-barrier ids (0 is __syncthreads).
struct Bars {
  static constexpr int kChain = 1, kHelper = 2, kDhReady = 3, kDhFree = 4, kDvReady = 5, kDvFree = 6;
  __device__ static constexpr int full(int s) { return 7 + s; }   // a slot's tiles, dOs and gates are in place
  __device__ static constexpr int empty(int s) { return 9 + s; }  // the chain is done with a slot
};

// x * f for the eight 16-bit values of a 16-byte piece.
template <class T>
__device__ __forceinline__ uint4 scale8(uint4 v, float f) {
  auto one = [&](uint32_t x) {
    const float2 a = unpack2<T>(x);
    return pack2<T>(a.x * f, a.y * f);
  };
  return make_uint4(one(v.x), one(v.y), one(v.z), one(v.w));
}

template <class T, int D, int VS>
__global__ void __launch_bounds__(256, 1) dstates_split_kernel(const Problem p, const FastWork<T> w) {
#if AK_ARCH_SM90A
  using Lay = DStatesSplitLayout<D, VS>;
  constexpr int kC = kFastC;
  constexpr int kMS = D / 64;  // m64 tiles of dh's rows
  constexpr int kNA = VS / 2;  // accumulator floats a thread of a 64 x VS tile
  const SwizzledSmem dyn = swizzled_smem();
  const uint32_t sbase = dyn.addr;
  unsigned char* const base = dyn.ptr;

  // Block x = sequence * (D / VS) + slice, as dstates.cuh.
  const int n = blockIdx.x / (D / VS);
  const int vs = (blockIdx.x % (D / VS)) * VS, h = blockIdx.y, hk = h / p.group;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = (tid >> 5) & 3, lane = tid & 31;
  const int4 si = p.map.seq_of(n);
  const int nch = (si.z - si.y + kC - 1) / kC;
  const int64_t P = p.padded();
  const int64_t state_base = (static_cast<int64_t>(n) * p.H + h) * D * D;
  auto chunk_row = [&](int c) { return static_cast<int64_t>(h) * P + static_cast<int64_t>(si.w + c) * kC; };
  auto gates = [&](int s) { return reinterpret_cast<const float*>(base + s * Lay::kSlot + Lay::kGate); };

  if (wg == 0) {
    // ---------------- the chain ----------------
    const StateCoords at{D, 0, vs, warp, lane >> 2, lane & 3};
    float dh[kMS][kNA];
#pragma unroll
    for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
      for (int i = 0; i < kNA; ++i) {
        const int64_t e = state_base + static_cast<int64_t>(at.row(ms, i)) * D + at.col(i) + (i & 1);
        dh[ms][i] = p.d_final_state != nullptr ? p.d_final_state[e] : 0.f;
      }
    }
    const uint64_t desc_dh = make_desc_sw128(sbase + Lay::kDh, D * 128, 1024);
    const uint64_t desc_dv = make_desc_sw128(sbase + Lay::kDv, 64 * 128, 1024);
    for (int it = 0; it < nch; ++it) {
      const int c = nch - 1 - it, s = it & 1;
      const uint32_t sb = sbase + s * Lay::kSlot;
      named_sync(Bars::full(s), 256);
      const float* gc = gates(s);
      const float gl = gc[kC - 1];
      // dh in 16 bits now: reading dh's registers while Y and X are in flight would make ptxas serialise
      // every wgmma of the kernel.
      uint32_t dhp[kMS][kNA / 2];
      fwd::pack_state16<T>(dh, dhp);
      // Y = P^T dO and X = Q^T dOs (A read M-major from the [token, .] tiles, B N-major).
      float y[kNA], x[kMS][kNA];
      wgmma_fence();
      {
        const uint64_t dp = make_desc_sw128(sb + Lay::kP, 64 * 128, 1024);
        const uint64_t ddo = make_desc_sw128(sb + Lay::kDO, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < kC / 16; ++kk) {
          Wgmma<VS, T>::template ss<1, 1>(y, dp + mnmajor_step(kk), ddo + mnmajor_step(kk), kk > 0);
        }
        const uint64_t ddos = make_desc_sw128(sb + Lay::kDOs, 64 * 128, 1024);
#pragma unroll
        for (int ms = 0; ms < kMS; ++ms) {
          const uint64_t dq = make_desc_sw128(sb + Lay::kQ + ms * 64 * 128, 64 * 128, 1024);
#pragma unroll
          for (int kk = 0; kk < kC / 16; ++kk) {
            Wgmma<VS, T>::template ss<1, 1>(x[ms], dq + mnmajor_step(kk), ddos + mnmajor_step(kk), kk > 0);
          }
        }
      }
      wgmma_commit();
      // dh to 16 bits (stored to dHs by the helper), once the helper has copied the previous one out.
      if (it > 0) named_sync(Bars::kDhFree, 256);
      fwd::store_state16(dhp, sbase + Lay::kDh, at, lane);
      fence_proxy_async();
      named_sync(Bars::kChain, 128);  // Dh complete, for this warpgroup's wgmma
      named_arrive(Bars::kDhReady, 256);
      // U = K Dh over D.
      float u[kNA];
      wgmma_fence();
      {
        const uint64_t dk = make_desc_sw128(sb + Lay::kK, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          Wgmma<VS, T>::template ss<0, 1>(u, dk + kmajor_step(64, kk), desc_dh + mnmajor_step(kk), kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(u);
      fence_regs(y);
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) fence_regs(x[ms]);
      // -dv_new = -(e^(gl - gc_i) U + Y), 16 bits, four accumulator pairs a stmatrix.
      float dec[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) dec[r] = __expf(gl - gc[16 * warp + (lane >> 2) + 8 * r]);
      if (it > 0) named_sync(Bars::kDvFree, 256);
#pragma unroll
      for (int cb = 0; cb < VS / 8; cb += 2) {
        float v[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) v[m] = -fmaf(dec[(m >> 1) & 1], u[4 * cb + m], y[4 * cb + m]);
        stmatrix_x4(fwd::frag_x4_addr(sbase + Lay::kDv, 64, 16 * warp, cb, lane), pack2<T>(v[0], v[1]),
                    pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
      }
      fence_proxy_async();
      named_sync(Bars::kChain, 128);
      named_arrive(Bars::kDvReady, 256);
      // dh <- e^gl dh + X + W^T (-dv_new).
      const float eg = __expf(gl);
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
#pragma unroll
        for (int i = 0; i < kNA; ++i) dh[ms][i] = fmaf(eg, dh[ms][i], x[ms][i]);
      }
      wgmma_fence();
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) {
        const uint64_t dw = make_desc_sw128(sb + Lay::kW + ms * 64 * 128, 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < kC / 16; ++kk) {
          Wgmma<VS, T>::template ss<1, 1>(dh[ms], dw + mnmajor_step(kk), desc_dv + mnmajor_step(kk), 1);
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < kMS; ++ms) fence_regs(dh[ms]);
      if (c >= 2) {  // chunk c - 2 may load into this slot
        fence_proxy_async();
        named_arrive(Bars::empty(s), 256);
      }
    }
    if (p.d_initial_state != nullptr) fwd::store_state(dh, fwd::StateOut{p.d_initial_state + state_base, D, 1}, at);
  } else {
    // ---------------- the helper ----------------
    auto load = [&](int c, int s) {
      const int t0 = si.y + c * kC, len = min(kC, si.z - t0);
      const int64_t row = chunk_row(c);
      const uint32_t sb = sbase + s * Lay::kSlot;
      fwd::async_rows_sw128<D, 128>(sb + Lay::kK, len, static_cast<const T*>(p.k.p) + p.k.offset(si.x, t0, hk),
                                    p.k.st, wtid);
      fwd::async_rows_sw128<D, 128>(sb + Lay::kW, kC, w.W + row * D, D, wtid);
      fwd::async_rows_sw128<D, 128>(sb + Lay::kQ, len, static_cast<const T*>(p.q.p) + p.q.offset(si.x, t0, hk),
                                    p.q.st, wtid);
      fwd::async_rows_sw128<64, 128>(sb + Lay::kP, kC, w.P + row * kC, kC, wtid);
      fwd::async_rows_sw128<VS, 128>(sb + Lay::kDO, len,
                                     static_cast<const T*>(p.dout.p) + p.dout.offset(si.x, t0, h) + vs, p.dout.st,
                                     wtid);
      if (wtid < kC / 4) cp_async16(sb + Lay::kGate + 16 * wtid, w.gc + row + 4 * wtid, 16);
      cp_async_commit();
    };
    // Slot s's dO rows times scale e^gc, into dOs (after every helper thread's copies have landed), then
    // the slot is handed to the chain.
    auto publish = [&](int s) {
      named_sync(Bars::kHelper, 128);
      const unsigned char* src = base + s * Lay::kSlot + Lay::kDO;
      unsigned char* dst = base + s * Lay::kSlot + Lay::kDOs;
      const float* gc = gates(s);
      constexpr int kPieces = VS / 8;
      for (int e = wtid; e < kC * kPieces; e += 128) {
        const int r = e / kPieces, j = e % kPieces;
        const uint32_t off = sw128_offset(64, r, 8 * j);
        *reinterpret_cast<uint4*>(dst + off) =
            scale8<T>(*reinterpret_cast<const uint4*>(src + off), p.scale * __expf(gc[r]));
      }
      fence_proxy_async();  // the copies and dOs, before the chain's wgmma reads them
      named_arrive(Bars::full(s), 256);
    };
    if (nch > 0) load(nch - 1, 0);
    if (nch > 1) load(nch - 2, 1);
    if (nch > 0) {
      if (nch > 1) {
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      publish(0);
    }
    for (int it = 0; it < nch; ++it) {
      const int c = nch - 1 - it, s = it & 1;
      if (c >= 1) {  // chunk c - 1, loaded an iteration ago (or above)
        cp_async_wait<0>();
        publish(s ^ 1);
      }
      // The chain's by-products of chunk c, as 16-byte pieces of rows.
      const int64_t row = chunk_row(c);
      named_sync(Bars::kDhReady, 256);
      fwd::store_rows16<VS>(w.dHs + (static_cast<int64_t>(h) * p.NCt + si.w + c) * D * D + vs, D,
                            base + Lay::kDh, D, wtid);
      if (c > 0) named_arrive(Bars::kDhFree, 256);
      named_sync(Bars::kDvReady, 256);
      for (int e = wtid; e < kC * (VS / 8); e += 128) {
        const int r = e / (VS / 8), j = e % (VS / 8);
        uint4 v = *reinterpret_cast<const uint4*>(base + Lay::kDv + sw128_offset(64, r, 8 * j));
        v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;  // dv_new from -dv_new
        *reinterpret_cast<uint4*>(w.dU + (row + r) * D + vs + 8 * j) = v;
      }
      if (c > 0) named_arrive(Bars::kDvFree, 256);
      // This slot, once the chain is done with chunk c, takes chunk c - 2.
      if (c >= 2) {
        named_sync(Bars::empty(s), 256);
        load(c - 2, s);
      }
    }
  }
#else
  (void)p;
  (void)w;
#endif
}

}  // namespace dstates_split_detail
}  // namespace ak::linear::cuda::bwd

namespace ak::linear::cuda {

template <class T, int D, int VS>
void BwdDStatesSplit<T, D, VS>::launch(const Args& a, cudaStream_t s) {
  const bwd::Problem& p = a.p;
  constexpr int kSmem = bwd::DStatesSplitLayout<D, VS>::kAlloc;
  auto kernel = bwd::dstates_split_detail::dstates_split_kernel<T, D, VS>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const int64_t blocks = static_cast<int64_t>(D / VS) * p.N;
  require(blocks < (int64_t{1} << 31), "delta_rule_bwd on CUDA: too many sequences for the dstates pass");
  if (blocks == 0 || p.H == 0) return;
  kernel<<<dim3(static_cast<unsigned>(blocks), p.H), 256, kSmem, s>>>(p, a.w);
  ak::cuda::check_launch("delta_bwd fast: dstates (split)");
}

}  // namespace ak::linear::cuda
