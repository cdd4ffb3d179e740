// The general CUDA forward of softmax attention (sm_80 and newer): FlashAttention-2's schedule with
// mma.sync m16n8k16. One block of 4 warps owns 64 query rows (16 per warp); K and V tiles stream
// through a double-buffered shared-memory ring with cp.async. Serves every case the contract allows:
// any head dim that is a multiple of 8 up to 256 (zero-padded to the instantiated width kD),
// soft-capping, windows, varlen, GQA, Sq != Skv, any strides with a contiguous last dimension.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#include "attention/fwd/params.h"
#include "attention/fwd/softmax.cuh"
#include "generated/attention_launchers.h"
#include "cuda/runtime.cuh"

namespace ak::attention::cuda {

using namespace ::ak::arch;

template <int kD>
struct GeneralTile {
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = kD <= 128 ? 64 : 32;
  static constexpr int kThreads = 128;
  // Q, then two K and two V buffers.
  static constexpr int kSmemElems = (kBlockM + 4 * kBlockN) * kD;
};

// Rows of kD elements, 16-byte chunks XOR-swizzled by row % 8 so that ldmatrix's eight row reads
// land in eight different bank groups.
template <int kD>
__device__ __forceinline__ int swizzled(int row, int col) {
  return row * kD + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
}

// Copies rows [0, rows) of a tile into shared memory; rows >= valid_rows and columns >= d are
// zero-filled. `aligned`: the source and all its strides are 16-byte aligned, so cp.async can be
// used; otherwise plain element loads (then the caller's barrier orders them).
template <int kD, class T>
__device__ __forceinline__ void load_tile(T* smem, const T* src, int64_t row_stride, int rows, int valid_rows, int d,
                                          bool aligned, const void* any_valid) {
  constexpr int kChunks = kD / 8;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += 128) {
    const int r = idx / kChunks, c = idx % kChunks;
    T* dst = smem + swizzled<kD>(r, c * 8);
    const bool valid = r < valid_rows && c * 8 < d;
    if (aligned) {
      const T* from = valid ? src + r * row_stride + c * 8 : static_cast<const T*>(any_valid);
      cp_async16(dst, from, valid ? 16 : 0);
    } else {
      uint16_t vals[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (valid) {
        const uint16_t* from = reinterpret_cast<const uint16_t*>(src + r * row_stride + c * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e) vals[e] = from[e];
      }
      uint4 packed;
      packed.x = vals[0] | (uint32_t(vals[1]) << 16);
      packed.y = vals[2] | (uint32_t(vals[3]) << 16);
      packed.z = vals[4] | (uint32_t(vals[5]) << 16);
      packed.w = vals[6] | (uint32_t(vals[7]) << 16);
      *reinterpret_cast<uint4*>(dst) = packed;
    }
  }
}

template <int kD, class T>
__global__ void __launch_bounds__(128) attention_fwd_general_kernel(const FwdParams p, bool aligned) {
  using Tile = GeneralTile<kD>;
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBlockM * kD;
  T* sV = sK + 2 * kBlockN * kD;

  const TileCoord tc = decode_tile(blockIdx.x, p.num_m_blocks, p.hq, p.n_seq, p.heads_per_section);
  const SeqBounds sb = seq_bounds(p, tc.b);
  const int m0 = tc.m_block * kBlockM;
  if (m0 >= sb.q_len) return;
  const int m1 = min(m0 + kBlockM, sb.q_len);
  const KeyRange kr = key_range(m0, m1, sb.q_len, sb.kv_len, p.window_left, p.window_right, kBlockN);
  const int hk = tc.h / p.group;

  const T* q = static_cast<const T*>(p.q) + tc.b * p.q_batch + int64_t(sb.q_off + m0) * p.q_row + tc.h * p.q_head;
  const T* k = static_cast<const T*>(p.k) + tc.b * p.k_batch + int64_t(sb.kv_off) * p.k_row + hk * p.k_head;
  const T* v = static_cast<const T*>(p.v) + tc.b * p.v_batch + int64_t(sb.kv_off) * p.v_row + hk * p.v_head;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = kr.n_hi > kr.n_lo ? kr.n_hi - kr.n_lo : 0;

  // This thread's two rows (sequence positions) and the keys each admits.
  const int row[2] = {m0 + warp * 16 + lane / 4, m0 + warp * 16 + lane / 4 + 8};
  const RowWindow window = row_window(p, sb, row[0]);

  RowState st;
  float o[kD / 2];
  st.start(o);

  if (n > 0) {
    load_tile<kD>(sQ, q, p.q_row, kBlockM, m1 - m0, p.d, aligned, p.q);
    {
      const int key0 = (kr.n_hi - 1) * kBlockN;
      const int valid = min(kBlockN, sb.kv_len - key0);
      load_tile<kD>(sK, k + int64_t(key0) * p.k_row, p.k_row, kBlockN, valid, p.d, aligned, p.k);
      load_tile<kD>(sV, v + int64_t(key0) * p.v_row, p.v_row, kBlockN, valid, p.d, aligned, p.v);
      cp_async_commit();
    }
    for (int it = 0; it < n; ++it) {
      const int nb = kr.n_hi - 1 - it;
      const int buf = it & 1;
      if (it + 1 < n) {
        const int key0 = (nb - 1) * kBlockN;
        const int valid = min(kBlockN, sb.kv_len - key0);
        load_tile<kD>(sK + (buf ^ 1) * kBlockN * kD, k + int64_t(key0) * p.k_row, p.k_row, kBlockN, valid, p.d,
                      aligned, p.k);
        load_tile<kD>(sV + (buf ^ 1) * kBlockN * kD, v + int64_t(key0) * p.v_row, p.v_row, kBlockN, valid, p.d,
                      aligned, p.v);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();

      // S = Q K^T for this warp's 16 rows.
      const T* tK = sK + buf * kBlockN * kD;
      float s[kBlockN / 2];
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) s[i] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        if (ks * 16 >= p.d) break;  // zero padding: nothing to add
        uint32_t a[4];
        ldsm_x4(a, sQ + swizzled<kD>(warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), ks * 16 + 8 * (lane >> 4)));
#pragma unroll
        for (int j = 0; j < kBlockN / 16; ++j) {
          uint32_t b[4];
          ldsm_x4(b, tK + swizzled<kD>(j * 16 + (lane & 7) + 8 * (lane >> 4), ks * 16 + 8 * ((lane >> 3) & 1)));
          mma16816<T>(s + 8 * j, a, b[0], b[1]);
          mma16816<T>(s + 8 * j + 4, a, b[2], b[3]);
        }
      }

      if (p.softcap > 0.0f) apply_softcap(s, p.softcap_mul, p.softcap);
      if (tile_needs_mask(kr, nb * kBlockN, kBlockN)) apply_mask(s, nb * kBlockN + 2 * (lane & 3), window);
      float corr[2];
      softmax_step(s, st, p.exp_scale, corr);
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) o[i] *= corr[(i >> 1) & 1];
      uint32_t pw[kBlockN / 4];
      pack_pairs<T>(s, pw);

      // O += P V.
      const T* tV = sV + buf * kBlockN * kD;
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
#pragma unroll
        for (int j = 0; j < kD / 16; ++j) {
          if (j * 16 >= p.d) break;
          uint32_t b[4];
          ldsm_x4_trans(b, tV + swizzled<kD>(ks * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), j * 16 + 8 * (lane >> 4)));
          mma16816<T>(o + 8 * j, pw + 4 * ks, b[0], b[1]);
          mma16816<T>(o + 8 * j + 4, pw + 4 * ks, b[2], b[3]);
        }
      }
      __syncthreads();  // the next iteration's loads overwrite the buffer read last time
    }
  }

  float inv[2], lse[2];
  softmax_finish(st, p.exp_scale, inv, lse);
  T* out = static_cast<T*>(p.o) + tc.b * p.o_batch + int64_t(sb.q_off) * p.o_row + tc.h * p.o_head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= sb.q_len) continue;
    T* orow = out + int64_t(row[r]) * p.o_row;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int col = 8 * j + 2 * (lane & 3);
      if (col < p.d) {
        const uint32_t two = pack2<T>(o[4 * j + 2 * r] * inv[r], o[4 * j + 2 * r + 1] * inv[r]);
        uint16_t* dst = reinterpret_cast<uint16_t*>(orow + col);
        dst[0] = static_cast<uint16_t>(two & 0xffffu);
        dst[1] = static_cast<uint16_t>(two >> 16);
      }
    }
    if (p.lse != nullptr && (lane & 3) == 0) {
      p.lse[tc.b * p.lse_batch + tc.h * p.lse_head + int64_t(sb.q_off + row[r]) * p.lse_row] = lse[r];
    }
  }
}

template <class T, int D, int Tile>
void FwdGeneral<T, D, Tile>::launch(const Args& a, cudaStream_t stream) {
  const size_t smem = GeneralTile<D>::kSmemElems * sizeof(T);
  auto kernel = attention_fwd_general_kernel<D, T>;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int64_t tiles = int64_t(a.p.num_m_blocks) * a.p.hq * a.p.n_seq;
  kernel<<<static_cast<unsigned>(tiles), GeneralTile<D>::kThreads, smem, stream>>>(a.p, a.aligned);
  ::ak::cuda::check_launch("attention_fwd_general_kernel");
}

}  // namespace ak::attention::cuda
