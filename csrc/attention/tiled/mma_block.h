// The tiled attention block on tensor cores: up to 16 query rows (one m16 tile) against the same Sources
// as block.h, in tiles of 64 keys: load K and V (phase 1), scores Q K^T on mma.sync m16n8k16 (phase 2,
// warp w: keys 16 w .. 16 w + 15), the online softmax's statistics with P rounded to the operands' 16 bits
// (phase 3, 8 threads a row; P takes the place of the row's scores), P V on mma.sync into accumulator
// fragments (phase 4, warp w: head-dim columns [w D / 4, (w + 1) D / 4)). The tile's rows are looked up
// once (phase 0, during the previous tile, into the other of two lists). On the device, with separate K and
// V, the next tile's K loads while this tile's softmax and P V run, and its V while the next scores do.
//
// As with block.h, the CUDA kernels run the phases with a barrier between each and the CPU backends run
// them thread by thread; a warp's product is the one collective step: each lane builds its fragments from
// shared memory (the PTX layout of m16n8k16), then the device runs mma.sync and the host the same product
// over the 32 lanes' fragments (mma_host). So the CPU tests cover the fragment indexing and the softmax;
// what they take on trust is the hardware's reading of that layout, which the existing mma kernels share.
//
// A latent Source (DeepSeek's latent caches) has one tensor of rows of D columns whose first Dv columns are
// also the value: the block then holds one tile of rows in shared memory for both products, and its output
// rows have Dv columns.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "attention/tiled/block.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "arch/sm80.cuh"
#endif

namespace ak::attention::tiled {

constexpr int kMmaRows = 16;
constexpr int kMmaKeys = 64;
// Accumulators of a lane: Dv / 32 n8 tiles of 4 (Dv <= 256), and for a latent Source (Dv <= 512).
constexpr int kMmaAcc = 32;
constexpr int kMmaLatentAcc = 64;

// Whether Source is latent: it declares kLatentValues, its value width kValueDim (0: its member Dv), and
// gives the 8 columns from c of a cache row by key_ptr(row, c) (= key_ptr(0, c) + row key_stride(c)) and of
// query row r by query_ptr(r, c) (16-byte aligned).
template <class S, class = void>
struct LatentOf {
  static constexpr bool value = false;
  static constexpr int kDv = 0;
};
template <class S>
struct LatentOf<S, std::void_t<decltype(S::kLatentValues)>> {
  static constexpr bool value = S::kLatentValues;
  static constexpr int kDv = S::kValueDim;
};

AK_HD uint32_t pack16(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); }

// The A fragment of a 16 x 16 block of a row-major [16][stride] array at column k0.
AK_HD void fragment_a(const uint16_t* a, int64_t stride, int64_t k0, int lane, uint32_t out[4]) {
  const int g = lane >> 2, q = lane & 3;
  const uint16_t* r0 = a + g * stride + k0 + 2 * q;
  const uint16_t* r1 = r0 + 8 * stride;
  out[0] = pack16(r0[0], r0[1]), out[1] = pack16(r1[0], r1[1]);
  out[2] = pack16(r0[8], r0[9]), out[3] = pack16(r1[8], r1[9]);
}

// The B fragment (k x n = 16 x 8) when B[k][n] = rows[n0 + n][k0 + k] (K^T from K's rows).
AK_HD void fragment_b_rows(const uint16_t* rows, int64_t stride, int64_t n0, int64_t k0, int lane, uint32_t out[2]) {
  const int g = lane >> 2, q = lane & 3;
  const uint16_t* r = rows + (n0 + g) * stride + k0 + 2 * q;
  out[0] = pack16(r[0], r[1]), out[1] = pack16(r[8], r[9]);
}

// The B fragment when B[k][n] = m[k0 + k][n0 + n] (V itself).
AK_HD void fragment_b_cols(const uint16_t* m, int64_t stride, int64_t k0, int64_t n0, int lane, uint32_t out[2]) {
  const int g = lane >> 2, q = lane & 3;
  const uint16_t* c = m + (k0 + 2 * q) * stride + n0 + g;
  out[0] = pack16(c[0], c[stride]), out[1] = pack16(c[8 * stride], c[9 * stride]);
}

AK_HD float widen(uint16_t x, int32_t dtype) { return dtype == AK_BFLOAT16 ? bf16_to_float(x) : f16_to_float(x); }

// d += a b over the 32 lanes' fragments, as mma.sync m16n8k16 defines them (float accumulation).
inline void mma_host(int32_t dtype, const uint32_t (*a)[4], const uint32_t (*b)[2], float (*d)[4]) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane >> 2, q = lane & 3;
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
    for (int r = 0; r < 4; r++) {
      A[rows[r]][cols[r]] = widen(static_cast<uint16_t>(a[lane][r] & 0xffffu), dtype);
      A[rows[r]][cols[r] + 1] = widen(static_cast<uint16_t>(a[lane][r] >> 16), dtype);
    }
    for (int r = 0; r < 2; r++) {
      B[2 * q + 8 * r][g] = widen(static_cast<uint16_t>(b[lane][r] & 0xffffu), dtype);
      B[2 * q + 8 * r + 1][g] = widen(static_cast<uint16_t>(b[lane][r] >> 16), dtype);
    }
  }
  for (int lane = 0; lane < 32; lane++) {
    const int g = lane >> 2, q = lane & 3;
    for (int e = 0; e < 4; e++) {
      const int row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
      float sum = 0.f;
      for (int k = 0; k < 16; k++) sum += A[row][k] * B[k][col];
      d[lane][e] += sum;
    }
  }
}

#ifdef __CUDACC__
__device__ __forceinline__ void mma_device(int32_t dtype, const uint32_t a[4], const uint32_t b[2], float d[4]) {
  if (dtype == AK_BFLOAT16) ak::arch::mma16816<__nv_bfloat16>(d, a, b);
  else ak::arch::mma16816<__half>(d, a, b);
}
#endif

// Row strides of the scores (floats) and of P (16-bit), which overlays them: a row of P starts where its
// row of scores does. 68 floats = 272 bytes, so the eight rows of an ldmatrix of P fall on distinct banks.
constexpr int kMmaScoreStride = kMmaKeys + 4;
// exp(x) as exp2(x log2 e): one ex2.approx on the device instead of expf's range reduction.
constexpr float kMmaLog2e = 1.4426950408889634f;
constexpr int kMmaPStride = 2 * kMmaScoreStride;

struct MmaShared {
  float* s;        // [16][kMmaScoreStride] scores
  uint16_t* p;     // [16][kMmaPStride] probabilities rounded to 16 bits, over the scores
  float* m;        // [16]
  float* l;        // [16]
  float* alpha;    // [16]
  int64_t* rows;   // [2][kMmaKeys] the cache rows of a tile and of the next (-1: none)
  uint16_t* q;     // [16][D + 8] (rows past R zero)
  uint16_t* k;     // [kMmaKeys][D + 8]
  uint16_t* v;     // [kMmaKeys][D + 8] (latent: k itself)
  AK_HD static int64_t bytes(int64_t D, bool latent = false) {
    return 4 * 16 * kMmaScoreStride + 12 * 16 + 16 * kMmaKeys + 2 * 16 * (D + 8) +
           (latent ? 2 : 4) * kMmaKeys * (D + 8);
  }
  AK_HD static MmaShared carve(unsigned char* base, int64_t D, bool latent = false) {
    MmaShared sh;
    sh.s = reinterpret_cast<float*>(base);
    sh.p = reinterpret_cast<uint16_t*>(sh.s);
    sh.m = sh.s + 16 * kMmaScoreStride;
    sh.l = sh.m + 16;
    sh.alpha = sh.l + 16;
    sh.rows = reinterpret_cast<int64_t*>(sh.alpha + 16);
    sh.q = reinterpret_cast<uint16_t*>(sh.rows + 2 * kMmaKeys);
    sh.k = sh.q + 16 * (D + 8);
    sh.v = latent ? sh.k : sh.k + kMmaKeys * (D + 8);
    return sh;
  }
};

template <int kN>
struct MmaAcc {
  float c[kN];
};

// Whether the tensor-core block serves a call: block.h's dtypes and head dims, at most 16 query rows.
inline bool mma_serves(int32_t dtype, int64_t D, int64_t R) {
  return (dtype == AK_FLOAT16 || dtype == AK_BFLOAT16) && (D == 64 || D == 128 || D == 256) && R >= 1 && R <= 16;
}

// kDtype fixes the operands' dtype at compile time (the kernels' instances: one mma.sync and one conversion
// in the code, not both behind a branch at every product); 0 reads it from the Source (the host runs).
// kWarps (4 or 8) splits a tile's keys for the scores and the value columns for P V between the warps; at 8
// the softmax runs on 16 threads a row and each warp's scores sum their k16 steps in two chains.
template <class Source, int kD = 0, int kDtype = 0, int kWarps = 4>
struct MmaBlock {
  static_assert(kWarps == 4 || kWarps == 8, "the tensor-core block runs 4 or 8 warps");
  using Latent = LatentOf<Source>;
  static constexpr bool kLatent = Latent::value;
  static constexpr int kBlockThreads = 32 * kWarps;
  static constexpr int kWarpKeys = kMmaKeys / kWarps;    // a warp's keys of a tile (its scores)
  static constexpr int kWarpTiles = kWarpKeys / 8;       // n8 tiles of them
  static constexpr int kParts = kBlockThreads / 16;      // softmax threads a row
  static constexpr int kPartKeys = kMmaKeys / kParts;    // a softmax thread's keys
  // A lane's accumulators: a compile-time value width's, else the widest the Source may have.
  static constexpr int kAcc =
      (!kLatent ? kMmaAcc : Latent::kDv > 0 ? Latent::kDv / 8 : kMmaLatentAcc) * 4 / kWarps;
  using Acc = MmaAcc<kAcc>;

  const Source& src;
  AK_HD explicit MmaBlock(const Source& source) : src(source) {}
  AK_HD int64_t dim() const { return kD > 0 ? kD : src.D; }
  AK_HD int32_t dtype() const { return kDtype != 0 ? kDtype : src.dtype; }
  AK_HD int64_t stride() const { return dim() + 8; }
  // The value's width: D, or a latent Source's Dv.
  AK_HD int64_t vdim() const {
    if constexpr (!kLatent) return dim();
    else if constexpr (Latent::kDv > 0) return Latent::kDv;
    else return src.Dv;
  }

  // Before the first tile: q rows (zeros past R), statistics reset, accumulators zeroed. A latent Source's
  // rows move 16 bytes at a time through `copy(dst, from, ok)` (zeros when !ok), as the tiles do.
  template <class Copy>
  AK_HD void start(const MmaShared& sh, int t, Acc& acc, Copy&& copy) const {
    const int64_t D = dim();
    if constexpr (kLatent) {
      for (int64_t e = t; e < 2 * D; e += kBlockThreads) {  // 16 rows of D / 8 moves
        const int64_t r = e / (D / 8), c = 8 * (e % (D / 8));
        copy(sh.q + r * stride() + c, src.query_ptr(r < src.R ? r : 0, c), r < src.R);
      }
    } else {
      for (int64_t e = t; e < 16 * D; e += kBlockThreads) {
        const int64_t r = e / D, c = e % D;
        sh.q[r * stride() + c] = r < src.R ? static_cast<const uint16_t*>(src.q)[src.q_at(r) + c] : 0;
      }
    }
    if (t < 16) sh.m[t] = -INFINITY, sh.l[t] = 0.f;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int j = 0; j < kAcc; j++) acc.c[j] = 0.f;
  }

  // Tile i's list of cache rows (tiles alternate between the two).
  AK_HD static const int64_t* rows_of(const MmaShared& sh, int64_t i) { return sh.rows + (i & 1) * kMmaKeys; }

  // The cache rows of tile i's slots (-1 past the range or without a row), looked up once a tile.
  AK_HD void mark_rows(const MmaShared& sh, int t, int64_t i) const {
    const int64_t tile = src.begin + i * kMmaKeys;
    if (t < kMmaKeys) sh.rows[(i & 1) * kMmaKeys + t] = tile + t < src.end ? src.row(tile + t) : -1;
  }

  // Phase 1: tile i's K rows (a latent Source's, which are also V) or, with `values`, its V rows (zeros for
  // slots without a row), 16 bytes a move by `copy`.
  template <class Copy>
  AK_HD void load(const MmaShared& sh, int t, int64_t i, bool values, Copy&& copy) const {
    const int64_t D = dim(), per_row = D / 8;
    const int64_t* rows = rows_of(sh, i);
    if constexpr (kLatent) {  // one row for both products
      // Warp w moves rows w, w + kWarps, ... and lane l their column groups l, l + 32, ...: a warp's move is 512
      // contiguous bytes of a row, and a lane's columns (so the Source's tensor they are in, and its row
      // stride) do not change from row to row.
      const int w = t / 32, lane = t % 32;
      for (int64_t c = 8 * lane; c < D; c += 256) {
        const uint16_t* from = src.key_ptr(0, c);
        const int64_t step = src.key_stride(c);
        for (int64_t j = w; j < kMmaKeys; j += kWarps) {
          const int64_t row = rows[j];
          copy(sh.k + j * stride() + c, from + (row >= 0 ? row : 0) * step, row >= 0);
        }
      }
    } else {
      // D / 8 divides the threads (D = 64, 128, 256): a thread moves one column group c of every
      // (kBlockThreads / per_row)-th row, so only the row changes from move to move.
      const int64_t c = 8 * (t % per_row), row_stride = src.Hkv * D;
      const uint16_t* from = static_cast<const uint16_t*>(values ? src.v : src.k) + src.hk * D + c;
      uint16_t* to = (values ? sh.v : sh.k) + c;
      for (int64_t j = t / per_row; j < kMmaKeys; j += kBlockThreads / per_row) {
        const int64_t row = rows[j];
        copy(to + j * stride(), from + (row >= 0 ? row : 0) * row_stride, row >= 0);
      }
    }
  }

  // The scores of lane `lane` of warp w for its n8 tile nt of tile i once its fragment c holds them.
  AK_HD void store_scores(const MmaShared& sh, int w, int nt, int lane, const float c[4], int64_t i) const {
    const int g = lane >> 2, q = lane & 3;
    const int64_t* rows = rows_of(sh, i);
    for (int e = 0; e < 4; e++) {
      const int64_t row = g + 8 * (e >> 1), key = kWarpKeys * w + 8 * nt + 2 * q + (e & 1);
      float s = -INFINITY;
      if (row < src.R && rows[key] >= 0 && src.visible(src.begin + i * kMmaKeys + key, row)) {
        s = c[e] * src.scale;
        if (src.softcap > 0.f) s = src.softcap * tanhf(s / src.softcap);
      }
      sh.s[row * kMmaScoreStride + key] = s;
    }
  }

  // Phase 3 runs on kParts threads a row (8 or 16; part p: keys kPartKeys p onwards); these are one part's
  // steps. The parts' maxima and sums combine as a butterfly over them (the host as the same pairwise tree, so
  // the same bits). A part reads its scores before any part of its row writes P over them.
  AK_HD static float max2(float a, float b) { return b > a ? b : a; }
  AK_HD static float part_scores(const MmaShared& sh, int row, int part, float x[kPartKeys]) {
    const float* s = sh.s + row * kMmaScoreStride + kPartKeys * part;
    float top = -INFINITY;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int j = 0; j < kPartKeys; j++) x[j] = s[j], top = max2(top, x[j]);
    return top;
  }
  // P of the part's keys rounded to 16 bits, and their unrounded sum (FlashAttention's: the log-sum-exp
  // stays exact to float).
  AK_HD float part_exp(const float x[kPartKeys], float top, uint16_t p[kPartKeys]) const {
    float sum = 0.f;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int j = 0; j < kPartKeys; j++) {
      const float e = top == -INFINITY || x[j] == -INFINITY ? 0.f : exp2f((x[j] - top) * kMmaLog2e);
#ifdef __CUDA_ARCH__
      p[j] = dtype() == AK_BFLOAT16 ? __bfloat16_as_ushort(__float2bfloat16_rn(e)) : __half_as_ushort(__float2half_rn(e));
#else
      p[j] = dtype() == AK_BFLOAT16 ? float_to_bf16(e) : float_to_f16(e);
#endif
      sum += e;
    }
    return sum;
  }
  AK_HD static uint16_t* part_p(const MmaShared& sh, int row, int part) {
    return sh.p + row * kMmaPStride + kPartKeys * part;
  }
  // The row's statistics after the tile: top the new max (over the old one too), sum the tile's P.
  AK_HD void commit_row(const MmaShared& sh, int row, float old, float top, float sum) const {
    if (top == -INFINITY) {
      sh.alpha[row] = 1.f;
      return;
    }
    const float alpha = old == -INFINITY ? 0.f : exp2f((old - top) * kMmaLog2e);
    sh.alpha[row] = alpha;
    sh.l[row] = sh.l[row] * alpha + sum;
    sh.m[row] = top;
  }
  void softmax_on_host(const MmaShared& sh) const {
    for (int row = 0; row < 16; row++) {
      const float old = sh.m[row];
      float top = -INFINITY, sums[kParts], x[kParts][kPartKeys];
      for (int part = 0; part < kParts; part++) top = max2(top, part_scores(sh, row, part, x[part]));
      top = max2(top, old);
      for (int part = 0; part < kParts; part++) {
        uint16_t p[kPartKeys];
        sums[part] = part_exp(x[part], top, p);
        std::memcpy(part_p(sh, row, part), p, sizeof(p));
      }
      // The butterfly's pairwise tree: ((s0 + s1) + (s2 + s3)) + ... (every lane ends with these bits).
      for (int width = 1; width < kParts; width *= 2) {
        for (int part = 0; part < kParts; part += 2 * width) sums[part] = sums[part] + sums[part + width];
      }
      commit_row(sh, row, old, top, sums[0]);
    }
  }
#ifdef __CUDACC__
  __device__ void softmax_on_device(const MmaShared& sh, int t) const {
    const int row = t >> (kParts == 8 ? 3 : 4), part = t & (kParts - 1);
    const float old = sh.m[row];
    float x[kPartKeys];
    float top = part_scores(sh, row, part, x);
#pragma unroll
    for (int o = 1; o < kParts; o <<= 1) top = max2(top, __shfl_xor_sync(0xffffffffu, top, o));
    top = max2(top, old);
    uint16_t p[kPartKeys];
    float sum = part_exp(x, top, p);
    __syncwarp();  // the row's parts (lanes of this warp) have read their scores and the old max
    if constexpr (kPartKeys == 8) {
      *reinterpret_cast<uint4*>(part_p(sh, row, part)) =
          make_uint4(pack16(p[0], p[1]), pack16(p[2], p[3]), pack16(p[4], p[5]), pack16(p[6], p[7]));
    } else {
      *reinterpret_cast<uint2*>(part_p(sh, row, part)) = make_uint2(pack16(p[0], p[1]), pack16(p[2], p[3]));
    }
#pragma unroll
    for (int o = 1; o < kParts; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (part == 0) commit_row(sh, row, old, top, sum);
  }
#endif

  AK_HD int n_tiles() const { return static_cast<int>(vdim() / (8 * kWarps)); }  // n8 tiles of a warp's columns

  // The rescale of a lane's accumulators by its rows' alpha (before a tile's P V).
  AK_HD void rescale(const MmaShared& sh, int lane, Acc& acc) const {
    const int g = lane >> 2;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int nt = 0; nt < kAcc / 4; nt++) {
      if (nt >= n_tiles()) break;
      acc.c[4 * nt] *= sh.alpha[g], acc.c[4 * nt + 1] *= sh.alpha[g];
      acc.c[4 * nt + 2] *= sh.alpha[g + 8], acc.c[4 * nt + 3] *= sh.alpha[g + 8];
    }
  }

  // After the last tile: lane's outputs (rows g and g + 8 of its columns) and the rows' statistics.
  AK_HD void finish(const MmaShared& sh, int t, const Acc& acc) const {
    const int w = t / 32, lane = t % 32, g = lane >> 2, q = lane & 3;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int nt = 0; nt < kAcc / 4; nt++) {
      if (nt >= n_tiles()) break;
      const int64_t col = w * (vdim() / kWarps) + 8 * nt + 2 * q;
      for (int half = 0; half < 2; half++) {
        const int64_t row = g + 8 * half;
        if (row >= src.R) continue;
        const float l = sh.l[row], inv = l > 0.f ? 1.f / l : 0.f;
        src.write(row, col, acc.c[4 * nt + 2 * half] * inv, acc.c[4 * nt + 2 * half + 1] * inv);
      }
    }
    if (t < src.R) src.stats(t, sh.m[t], sh.l[t]);
  }

  // The whole block on the host: each phase on every thread (or every warp's lanes) in turn.
  void run_on_host() const {
    const int64_t D = dim(), Dv = vdim();
    std::vector<Words> memory(static_cast<size_t>(MmaShared::bytes(D, kLatent) / 16 + 1));
    const MmaShared sh = MmaShared::carve(reinterpret_cast<unsigned char*>(memory.data()), D, kLatent);
    const auto copy = [](uint16_t* dst, const uint16_t* from, bool ok) {
      if (ok) std::memcpy(dst, from, 16);
      else std::memset(dst, 0, 16);
    };
    std::vector<Acc> acc(kBlockThreads);
    uint32_t a[32][4], b[32][2];
    float c[32][4];
    for (int t = 0; t < kBlockThreads; t++) start(sh, t, acc[t], copy), mark_rows(sh, t, 0);
    for (int64_t i = 0; src.begin + i * kMmaKeys < src.end; i++) {
      for (int t = 0; t < kBlockThreads; t++) mark_rows(sh, t, i + 1);  // the next tile's, into the other list
      for (int t = 0; t < kBlockThreads; t++) load(sh, t, i, false, copy);
      if constexpr (!kLatent) {
        for (int t = 0; t < kBlockThreads; t++) load(sh, t, i, true, copy);
      }
      for (int w = 0; w < kWarps; w++) {  // phase 2, warp by warp
        for (int nt = 0; nt < kWarpTiles; nt++) {
          // At 8 warps the odd k16 steps sum into a second chain, added at the end (as the device does).
          float odd[32][4];
          for (int lane = 0; lane < 32; lane++) {
            for (int e = 0; e < 4; e++) c[lane][e] = odd[lane][e] = 0.f;
          }
          for (int64_t k0 = 0; k0 < D; k0 += 16) {
            for (int lane = 0; lane < 32; lane++) {
              fragment_a(sh.q, stride(), k0, lane, a[lane]);
              fragment_b_rows(sh.k, stride(), kWarpKeys * w + 8 * nt, k0, lane, b[lane]);
            }
            mma_host(dtype(), a, b, kWarps == 8 && (k0 / 16) % 2 == 1 ? odd : c);
          }
          for (int lane = 0; lane < 32; lane++) {
            if (kWarps == 8) {
              for (int e = 0; e < 4; e++) c[lane][e] += odd[lane][e];
            }
            store_scores(sh, w, nt, lane, c[lane], i);
          }
        }
      }
      softmax_on_host(sh);
      for (int w = 0; w < kWarps; w++) {  // phase 4, warp by warp
        for (int lane = 0; lane < 32; lane++) rescale(sh, lane, acc[32 * w + lane]);
        for (int nt = 0; nt < n_tiles(); nt++) {
          for (int lane = 0; lane < 32; lane++) {
            for (int e = 0; e < 4; e++) c[lane][e] = acc[32 * w + lane].c[4 * nt + e];
          }
          for (int64_t k0 = 0; k0 < kMmaKeys; k0 += 16) {
            for (int lane = 0; lane < 32; lane++) {
              fragment_a(sh.p, kMmaPStride, k0, lane, a[lane]);
              fragment_b_cols(sh.v, stride(), k0, w * (Dv / kWarps) + 8 * nt, lane, b[lane]);
            }
            mma_host(dtype(), a, b, c);
          }
          for (int lane = 0; lane < 32; lane++) {
            for (int e = 0; e < 4; e++) acc[32 * w + lane].c[4 * nt + e] = c[lane][e];
          }
        }
      }
    }
    for (int t = 0; t < kBlockThreads; t++) finish(sh, t, acc[t]);
  }

#ifdef __CUDACC__
  // Phase 2 of tile i on the device: warp w's scores, stored. A fragments: q rows 8 (m & 1) + r at columns
  // k0 + 8 (m >> 1); the warp's two n8 tiles of keys in one x4.
  __device__ void scores_on_device(const MmaShared& sh, int w, int lane, int64_t i) const {
    const int m = lane >> 3, r = lane & 7;
    if constexpr (kWarps == 8) {  // one n8 tile of keys; an x4 of K holds two k16 steps, one chain each
      float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 4
      for (int64_t k0 = 0; k0 < dim(); k0 += 32) {
        uint32_t a0[4], a1[4], b[4];
        ak::arch::ldsm_x4(a0, sh.q + (8 * (m & 1) + r) * stride() + k0 + 8 * (m >> 1));
        ak::arch::ldsm_x4(a1, sh.q + (8 * (m & 1) + r) * stride() + k0 + 16 + 8 * (m >> 1));
        ak::arch::ldsm_x4(b, sh.k + (8 * w + r) * stride() + k0 + 8 * m);
        mma_device(dtype(), a0, b, c[0]);
        mma_device(dtype(), a1, b + 2, c[1]);
      }
#pragma unroll
      for (int e = 0; e < 4; e++) c[0][e] += c[1][e];
      store_scores(sh, w, 0, lane, c[0], i);
      return;
    }
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll 4
    for (int64_t k0 = 0; k0 < dim(); k0 += 16) {
      uint32_t a[4], b[4];
      ak::arch::ldsm_x4(a, sh.q + (8 * (m & 1) + r) * stride() + k0 + 8 * (m >> 1));
      ak::arch::ldsm_x4(b, sh.k + (16 * w + 8 * (m >> 1) + r) * stride() + k0 + 8 * (m & 1));
      mma_device(dtype(), a, b, c[0]);
      mma_device(dtype(), a, b + 2, c[1]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++) store_scores(sh, w, nt, lane, c[nt], i);
  }

  // Phase 4 on the device: warp w's accumulators rescaled, then P V. P's rows as q's; V's keys
  // k0 + 8 (m & 1) + r transposed, two n8 tiles of columns an x4.
  __device__ void values_on_device(const MmaShared& sh, int w, int lane, Acc& acc) const {
    const int m = lane >> 3, r = lane & 7;
    const int64_t Dv = vdim();
    rescale(sh, lane, acc);
#pragma unroll
    for (int k0 = 0; k0 < kMmaKeys; k0 += 16) {
      uint32_t a[4];
      ak::arch::ldsm_x4(a, sh.p + (8 * (m & 1) + r) * kMmaPStride + k0 + 8 * (m >> 1));
#pragma unroll
      for (int np = 0; np < kAcc / 8; np++) {
        if (2 * np >= n_tiles()) break;
        uint32_t b[4];
        ak::arch::ldsm_x4_trans(b, sh.v + (k0 + 8 * (m & 1) + r) * stride() + w * (Dv / kWarps) + 16 * np + 8 * (m >> 1));
        mma_device(dtype(), a, b, acc.c + 8 * np);
        mma_device(dtype(), a, b + 2, acc.c + 8 * np + 4);
      }
    }
  }

  // The whole block on the device: the same phases, a barrier between each, moves by asynchronous copies
  // (they hold no registers) and fragments by ldmatrix (the layout of the fragment functions above). With
  // separate K and V, each is one cp.async group a tile: K of tile i + 1 is issued once the scores of tile i
  // have read K, V of tile i + 1 once its P V has read V, so each loads behind the other's products. A
  // latent Source's one tile of rows serves both products and loads before them.
  __device__ void run_on_device(unsigned char* smem) const {
    const int t = static_cast<int>(threadIdx.x), w = t / 32, lane = t % 32;
    const MmaShared sh = MmaShared::carve(smem, dim(), kLatent);
    const auto copy = [](uint16_t* dst, const uint16_t* from, bool ok) {
      ak::arch::cp_async16(dst, from, ok ? 16 : 0);
    };
    Acc acc;
    start(sh, t, acc, copy);
    mark_rows(sh, t, 0);
    __syncthreads();
    if constexpr (kLatent) {
      for (int64_t i = 0; src.begin + i * kMmaKeys < src.end; i++) {
        load(sh, t, i, false, copy);
        ak::arch::cp_async_commit();
        mark_rows(sh, t, i + 1);  // the other list: its last reader, tile i - 1's scores, is behind barriers
        ak::arch::cp_async_wait_all();
        __syncthreads();
        scores_on_device(sh, w, lane, i);
        __syncthreads();
        softmax_on_device(sh, t);
        __syncthreads();
        values_on_device(sh, w, lane, acc);
        __syncthreads();
      }
    } else {
      if (src.begin < src.end) {
        load(sh, t, 0, false, copy);
        ak::arch::cp_async_commit();
        load(sh, t, 0, true, copy);
        ak::arch::cp_async_commit();
      }
      // In flight at the top of tile i: its K group, then its V group.
      for (int64_t i = 0; src.begin + i * kMmaKeys < src.end; i++) {
        const bool more = src.begin + (i + 1) * kMmaKeys < src.end;
        mark_rows(sh, t, i + 1);  // the other list: its last reader, tile i - 1's scores, is behind barriers
        ak::arch::cp_async_wait<1>();  // this thread's K of tile i
        __syncthreads();
        scores_on_device(sh, w, lane, i);
        __syncthreads();  // every warp has read K, the scores are in place, the next rows are marked
        if (more) load(sh, t, i + 1, false, copy);
        ak::arch::cp_async_commit();
        softmax_on_device(sh, t);
        ak::arch::cp_async_wait<1>();  // this thread's V of tile i (K of the next may be in flight)
        __syncthreads();
        values_on_device(sh, w, lane, acc);
        __syncthreads();  // every warp has read V and P
        if (more) load(sh, t, i + 1, true, copy);
        ak::arch::cp_async_commit();
      }
    }
    ak::arch::cp_async_commit();  // with no tile, a latent Source's q copies are still open
    ak::arch::cp_async_wait_all();
    finish(sh, t, acc);
  }
#endif
};

// The block's kernels' form for a dtype: MmaBlockOf<AK_BFLOAT16>::Block<Source, D>.
template <int kDtype>
struct MmaBlockOf {
  template <class Source, int kD>
  using Block = MmaBlock<Source, kD, kDtype>;
};

#ifdef __CUDACC__
// The dtype constant of a kernel instance's 16-bit element type (the blocks' compile-time kDtype).
template <class T>
constexpr int kHalfDtype = std::is_same<T, __nv_bfloat16>::value ? AK_BFLOAT16 : AK_FLOAT16;
#endif

}  // namespace ak::attention::tiled
