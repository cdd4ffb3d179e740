// The lightning indexer on tensor cores, for DeepSeek's 64 heads of 128 dims: a block of 128 threads takes
// two queries and walks a chunk of keys, 64 a tile. The two queries' q rows (all heads) stay in shared memory;
// a tile's k rows are loaded once for both. Warp w scores query w / 2 (its 64 heads as four m16 tiles)
// against the tile's keys 32 (w % 2) .. + 31 (four n8 tiles) on mma.sync: m16n8k16 for bfloat16 and m16n8k32
// for float8_e4m3. In bytes both take a k-step of 32 bytes whose fragments are the same 32-bit words (4
// bytes at 4 (lane % 4) and at 16 + 4 (lane % 4) of rows lane / 4 and lane / 4 + 8), so one loader serves
// both. The epilogue scales each score by its key's scale, keeps the positive ones times the head weight and
// sums a lane's rows, then the eight lanes of a column (the butterfly over lane / 4) finish the head sum.
//
// As with the attention blocks (attention/tiled/block.h), the CPU backend runs the same phases: the loads
// thread by thread, each warp's product over its 32 lanes' fragments (mma_bytes_host), the butterfly over
// the lanes' partial sums. What it takes on trust is the hardware's reading of the fragments and its
// accumulation (float8 products on the tensor cores are summed with fewer bits than float32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention/tiled/block.h"
#include "core/numeric.h"
#include "include/attnkit.h"
#include "sparse/problem.h"

#ifdef __CUDACC__
#include "arch/sm80.cuh"
// Every loop over a lane's registers unrolled on the device (an indexed register array lives in local memory).
#define AK_IDX_UNROLL _Pragma("unroll")
#else
#define AK_IDX_UNROLL
#endif

namespace ak::sparse {

constexpr int kIdxThreads = 128;
constexpr int kIdxQueries = 2;  // queries a block
constexpr int kIdxKeys = 64;    // keys a tile
constexpr int kIdxHeads = 64;   // the heads the block is built for
constexpr int kIdxDim = 128;    // and the head dim
constexpr int kIdxChunk = 512;  // keys a block walks
constexpr int kIdxPad = 16;     // bytes after each shared row (rows 4 banks apart)

// Whether the tensor-core block serves an indexer call.
inline bool indexer_block_serves(int32_t dtype, int64_t H, int64_t D) {
  return (dtype == AK_BFLOAT16 || dtype == AK_FLOAT8_E4M3) && H == kIdxHeads && D == kIdxDim;
}

AK_HD int64_t indexer_row_bytes(int32_t dtype) { return kIdxDim * (dtype == AK_FLOAT8_E4M3 ? 1 : 2); }

// Shared memory: the queries' rows [2 x 64][row + pad], then the tile's key rows [64][row + pad].
AK_HD int64_t indexer_shared_bytes(int32_t dtype) {
  return (kIdxQueries * kIdxHeads + kIdxKeys) * (indexer_row_bytes(dtype) + kIdxPad);
}

// A's fragment (16 rows x 32 bytes at byte k0 of rows starting at `rows`) and B's (8 key rows from n0).
// (Every address is 4-byte aligned: strides are multiples of 16 bytes, k0 of 32.)
AK_HD uint32_t word_at(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
AK_HD void fragment_a_bytes(const uint8_t* rows, int64_t stride, int64_t k0, int lane, uint32_t out[4]) {
  const int g = lane >> 2, q = lane & 3;
  const uint8_t* r0 = rows + g * stride + k0 + 4 * q;
  const uint8_t* r1 = r0 + 8 * stride;
  out[0] = word_at(r0), out[1] = word_at(r1), out[2] = word_at(r0 + 16), out[3] = word_at(r1 + 16);
}
AK_HD void fragment_b_bytes(const uint8_t* rows, int64_t stride, int64_t n0, int64_t k0, int lane, uint32_t out[2]) {
  const int g = lane >> 2, q = lane & 3;
  const uint8_t* r = rows + (n0 + g) * stride + k0 + 4 * q;
  out[0] = word_at(r), out[1] = word_at(r + 16);
}

// Element e of a 32-bit fragment word: two bfloat16 or four float8_e4m3, the lowest first.
inline float word_element(uint32_t w, int e, int32_t dtype) {
  if (dtype == AK_FLOAT8_E4M3) return e4m3_to_float(static_cast<uint8_t>(w >> (8 * e)));
  return bf16_to_float(static_cast<uint16_t>(w >> (16 * e)));
}

// d += a b over the 32 lanes' fragments of one 32-byte k-step, as mma.sync m16n8k16 (bfloat16) or m16n8k32
// (float8_e4m3) define them: float products summed in float.
inline void mma_bytes_host(int32_t dtype, const uint32_t (*a)[4], const uint32_t (*b)[2], float (*d)[4]) {
  const int per = dtype == AK_FLOAT8_E4M3 ? 4 : 2, K = 8 * per;  // elements a word, elements a k-step
  float A[16][32], B[32][8];
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane >> 2, q = lane & 3;
    for (int r = 0; r < 4; r++) {
      const int row = g + 8 * (r & 1), col = per * q + (r >> 1) * (K / 2);
      for (int e = 0; e < per; e++) A[row][col + e] = word_element(a[lane][r], e, dtype);
    }
    for (int r = 0; r < 2; r++) {
      for (int e = 0; e < per; e++) B[per * q + r * (K / 2) + e][g] = word_element(b[lane][r], e, dtype);
    }
  }
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane >> 2, q = lane & 3;
    for (int e = 0; e < 4; e++) {
      const int row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
      float sum = 0.f;
      for (int k = 0; k < K; k++) sum += A[row][k] * B[k][col];
      d[lane][e] += sum;
    }
  }
}

#ifdef __CUDACC__
// d += a b for one 32-byte k-step on the tensor cores.
template <bool kFp8>
__device__ __forceinline__ void mma_bytes(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  if constexpr (kFp8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
  } else {
    ak::arch::mma16816<__nv_bfloat16>(d, a, b);
  }
}
#endif

// One block: queries 2 y, 2 y + 1, keys [x kIdxChunk, (x + 1) kIdxChunk) of an Indexer problem.
struct IndexerBlock {
  const Indexer& p;
  int64_t i0, key_begin, key_end;
  int64_t row_bytes, stride;

  AK_HD IndexerBlock(const Indexer& problem, int64_t chunk, int64_t pair)
      : p(problem), i0(pair * kIdxQueries), key_begin(chunk * kIdxChunk) {
    key_end = key_begin + kIdxChunk < p.Sk ? key_begin + kIdxChunk : p.Sk;
    row_bytes = indexer_row_bytes(p.dtype), stride = row_bytes + kIdxPad;
  }
  AK_HD uint8_t* q_rows(unsigned char* smem) const { return smem; }
  AK_HD uint8_t* k_rows(unsigned char* smem) const { return smem + kIdxQueries * kIdxHeads * stride; }
  AK_HD bool has_query(int qi) const { return i0 + qi < p.Sq; }

  // The queries' rows into shared memory, 16 bytes a move (zeros for a query past Sq).
  AK_HD void start(unsigned char* smem, int t) const {
    const int64_t per_row = row_bytes / 16;
    for (int64_t e = t; e < kIdxQueries * kIdxHeads * per_row; e += kIdxThreads) {
      const int64_t r = e / per_row, c = 16 * (e % per_row), qi = r / kIdxHeads;
      ak::attention::tiled::Words w{};
      if (has_query(static_cast<int>(qi))) {
        const int64_t at = ((i0 + qi) * kIdxHeads + r % kIdxHeads) * row_bytes + c;
        w = *reinterpret_cast<const ak::attention::tiled::Words*>(static_cast<const uint8_t*>(p.q) + at);
      }
      *reinterpret_cast<ak::attention::tiled::Words*>(q_rows(smem) + r * stride + c) = w;
    }
  }

  // Whether either query's range meets the tile's keys [tile, tile + 64) (else the tile is all fill).
  AK_HD bool tile_needed(int64_t tile) const {
    for (int qi = 0; qi < kIdxQueries; qi++) {
      if (!has_query(qi)) continue;
      const int64_t lo = p.ks[i0 + qi], hi = p.ke[i0 + qi];
      if (lo < tile + kIdxKeys && hi > tile && lo < hi) return true;
    }
    return false;
  }

  // Phase 1: the tile's key rows (zeros past the block's keys).
  AK_HD void load(unsigned char* smem, int t, int64_t tile) const {
    const int64_t per_row = row_bytes / 16;
    for (int64_t e = t; e < kIdxKeys * per_row; e += kIdxThreads) {
      const int64_t j = e / per_row, c = 16 * (e % per_row), key = tile + j;
      ak::attention::tiled::Words w{};
      if (key < key_end) {
        w = *reinterpret_cast<const ak::attention::tiled::Words*>(static_cast<const uint8_t*>(p.k) + key * row_bytes +
                                                                  c);
      }
      *reinterpret_cast<ak::attention::tiled::Words*>(k_rows(smem) + j * stride + c) = w;
    }
  }

  // The fill outside a query's range.
  AK_HD float fill() const { return p.clean ? -INFINITY : 0.f; }

  // A tile no range meets: thread t writes the fill of (query t / 64, key t % 64).
  AK_HD void write_fill(int t, int64_t tile) const {
    const int qi = t / kIdxKeys;
    const int64_t key = tile + t % kIdxKeys;
    if (has_query(qi) && key < key_end) p.logits[(i0 + qi) * p.Sk + key] = fill();
  }

  // Lane `lane` of warp w, after its product: acc[mt][nt][e] holds the scores of heads 16 mt + g (+ 8 for
  // e >= 2) against key 32 (w % 2) + 8 nt + 2 q + (e % 2). Its partial sums over its eight heads, per column.
  AK_HD void partial_sums(int w, int lane, int64_t tile, const float (*acc)[4][4], float part[4][2]) const {
    const int g = lane >> 2, q = lane & 3;
    const int64_t i = i0 + w / 2;
    AK_IDX_UNROLL
    for (int nt = 0; nt < 4; nt++) part[nt][0] = part[nt][1] = 0.f;
    if (!has_query(w / 2)) return;
    float weight[4][2];  // of the lane's heads
    AK_IDX_UNROLL
    for (int mt = 0; mt < 4; mt++) {
      AK_IDX_UNROLL
      for (int half = 0; half < 2; half++) weight[mt][half] = p.weights[i * kIdxHeads + 16 * mt + g + 8 * half];
    }
    AK_IDX_UNROLL
    for (int nt = 0; nt < 4; nt++) {
      AK_IDX_UNROLL
      for (int c = 0; c < 2; c++) {
        const int64_t key = tile + 32 * (w % 2) + 8 * nt + 2 * q + c;
        const float scale = key < key_end && p.k_scale ? p.k_scale[key] : 1.f;
        float sum = 0.f;
        AK_IDX_UNROLL
        for (int mt = 0; mt < 4; mt++) {
          AK_IDX_UNROLL
          for (int half = 0; half < 2; half++) {
            const float s = scale * acc[mt][nt][2 * half + c];
            if (s > 0.f) sum += weight[mt][half] * s;
          }
        }
        part[nt][c] = sum;
      }
    }
  }

  // After the butterfly (every lane of a column holds its sum): lane (g, q) writes key 32 (w % 2) + 8 (g / 2)
  // + 2 q + g % 2, so the warp's 32 keys go out as one row.
  AK_HD void write(int w, int lane, int64_t tile, const float part[4][2]) const {
    const int g = lane >> 2, q = lane & 3, qi = w / 2;
    const int64_t key = tile + 32 * (w % 2) + 8 * (g / 2) + 2 * q + g % 2;
    if (!has_query(qi) || key >= key_end) return;
    const int64_t i = i0 + qi;
    float v = 0.f;
    AK_IDX_UNROLL
    for (int nt = 0; nt < 4; nt++) {
      AK_IDX_UNROLL
      for (int c = 0; c < 2; c++) v = nt == g / 2 && c == g % 2 ? part[nt][c] : v;
    }
    p.logits[i * p.Sk + key] = key >= p.ks[i] && key < p.ke[i] ? v : fill();
  }

  // The whole block on the host: each phase over every thread (or every warp's lanes) in turn.
  void run_on_host() const {
    std::vector<ak::attention::tiled::Words> memory(static_cast<size_t>(indexer_shared_bytes(p.dtype) / 16 + 1));
    unsigned char* smem = reinterpret_cast<unsigned char*>(memory.data());
    for (int t = 0; t < kIdxThreads; t++) start(smem, t);
    uint32_t a[32][4], b[32][2];
    for (int64_t tile = key_begin; tile < key_end; tile += kIdxKeys) {
      if (!tile_needed(tile)) {
        for (int t = 0; t < kIdxThreads; t++) write_fill(t, tile);
        continue;
      }
      for (int t = 0; t < kIdxThreads; t++) load(smem, t, tile);
      for (int w = 0; w < 4; w++) {
        float acc[32][4][4][4];
        float c[32][4];
        for (int mt = 0; mt < 4; mt++) {
          for (int nt = 0; nt < 4; nt++) {
            for (int lane = 0; lane < 32; lane++) c[lane][0] = c[lane][1] = c[lane][2] = c[lane][3] = 0.f;
            for (int64_t k0 = 0; k0 < row_bytes; k0 += 32) {
              for (int lane = 0; lane < 32; lane++) {
                fragment_a_bytes(q_rows(smem) + ((w / 2) * kIdxHeads + 16 * mt) * stride, stride, k0, lane, a[lane]);
                fragment_b_bytes(k_rows(smem), stride, 32 * (w % 2) + 8 * nt, k0, lane, b[lane]);
              }
              mma_bytes_host(p.dtype, a, b, c);
            }
            for (int lane = 0; lane < 32; lane++) {
              for (int e = 0; e < 4; e++) acc[lane][mt][nt][e] = c[lane][e];
            }
          }
        }
        float part[32][4][2];
        for (int lane = 0; lane < 32; lane++) partial_sums(w, lane, tile, acc[lane], part[lane]);
        // The butterfly over lane / 4, as the device's shuffles: lane x adds lane x ^ off's sums.
        for (int off = 4; off < 32; off *= 2) {
          float before[32][4][2];
          std::memcpy(before, part, sizeof(part));
          for (int lane = 0; lane < 32; lane++) {
            for (int nt = 0; nt < 4; nt++) {
              for (int c2 = 0; c2 < 2; c2++) part[lane][nt][c2] += before[lane ^ off][nt][c2];
            }
          }
        }
        for (int lane = 0; lane < 32; lane++) write(w, lane, tile, part[lane]);
      }
    }
  }

#ifdef __CUDACC__
  template <bool kFp8>
  __device__ void run_on_device(unsigned char* smem) const {
    const int t = static_cast<int>(threadIdx.x), w = t / 32, lane = t % 32;
    start(smem, t);
    for (int64_t tile = key_begin; tile < key_end; tile += kIdxKeys) {
      if (!tile_needed(tile)) {  // the same for every thread
        write_fill(t, tile);
        continue;
      }
      __syncthreads();  // the previous tile's rows are read
      load(smem, t, tile);
      __syncthreads();
      float acc[4][4][4];
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
#pragma unroll
        for (int nt = 0; nt < 4; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
      }
      const uint8_t* qr = q_rows(smem) + (w / 2) * kIdxHeads * stride;
#pragma unroll
      for (int k0 = 0; k0 < kIdxDim * (kFp8 ? 1 : 2); k0 += 32) {
        uint32_t a[4][4], b[4][2];
#pragma unroll
        for (int mt = 0; mt < 4; mt++) fragment_a_bytes(qr + 16 * mt * stride, stride, k0, lane, a[mt]);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) fragment_b_bytes(k_rows(smem), stride, 32 * (w % 2) + 8 * nt, k0, lane, b[nt]);
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
#pragma unroll
          for (int nt = 0; nt < 4; nt++) mma_bytes<kFp8>(acc[mt][nt], a[mt], b[nt]);
        }
      }
      float part[4][2];
      partial_sums(w, lane, tile, acc, part);
#pragma unroll
      for (int off = 4; off < 32; off *= 2) {
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
          part[nt][0] += __shfl_xor_sync(0xffffffffu, part[nt][0], off);
          part[nt][1] += __shfl_xor_sync(0xffffffffu, part[nt][1], off);
        }
      }
      write(w, lane, tile, part);
    }
  }
#endif
};

}  // namespace ak::sparse

#undef AK_IDX_UNROLL
