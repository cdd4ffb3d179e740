// The launchers of the sparse registry rows: NSA's compressed and selected branches on the tiled attention
// blocks (a block per (token, KV head) at a compile-time head dim) and on the per-item kernels (a thread
// per (token, head, 32 value columns)); DeepSeek's sparse decode on the tensor-core block or per item. The
// element type T of a row names its instance; the tensor-core blocks take its dtype at compile time, the other
// kernels read it from the problem.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>
#include <type_traits>

#include "cuda/runtime.cuh"
#include "generated/sparse_launchers.h"
#include "attention/tiled/mma_block.h"
#include "attention/tiled/split_merge.cuh"
#include "sparse/dsa_source.h"
#include "sparse/indexer_block.h"
#include "sparse/rows.h"
#include "sparse/tiled.h"
#include "sparse/topk_block.h"

namespace ak::sparse::cuda {

namespace kernels {

template <template <class, int> class Block, class Source, int kD, class Problem>
__global__ void __launch_bounds__(ak::attention::tiled::kThreads) tiled(Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Source source(p, blockIdx.x, blockIdx.y);
  Block<Source, kD>(source).run_on_device(smem);
}

// A block of `kernel` per (token, KV head), with `smem` bytes of shared memory.
template <class Problem>
void launch_blocks(void (*kernel)(Problem), const Problem& p, int smem, cudaStream_t stream, const char* name) {
  if (p.seq.T == 0 || p.H == 0) return;
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>(p.seq.T), static_cast<unsigned>(p.Hkv));
  kernel<<<grid, ak::attention::tiled::kThreads, smem, stream>>>(p);
  ::ak::cuda::check_launch(name);
}

// A block per (token, KV head) of `Block` (CUDA-core or tensor-core).
template <template <class, int> class Block, class Source, int kD, class Problem>
void launch_tiled(const Problem& p, int smem, cudaStream_t stream, const char* name) {
  launch_blocks(tiled<Block, Source, kD, Problem>, p, smem, stream, name);
}

constexpr int kItemThreads = 128;

// Runs body(i) for every item i < n, a thread each.
template <class Body>
__global__ void each_item(int64_t n, Body body) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) body(i);
}

template <class Body>
void launch_items(int64_t n, const Body& body, cudaStream_t stream, const char* name) {
  if (n == 0) return;
  each_item<<<static_cast<unsigned>((n + kItemThreads - 1) / kItemThreads), kItemThreads, 0, stream>>>(n, body);
  ::ak::cuda::check_launch(name);
}

// NSA's block selection on tensor cores: warp w of block x takes item 4 x + w = (token, KV head).
template <int kK>
__global__ void __launch_bounds__(kTopkThreads) topk_mma(NsaTopk p) {
  __shared__ float move_v[kTopkWarps][kTopkMaxKept];
  __shared__ int32_t move_i[kTopkWarps][kTopkMaxKept];
  const int w = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kTopkWarps + w;
  if (item >= p.seq.T * p.Hkv) return;
  TopkBlock<kK>(p).run_on_device(item / p.Hkv, item % p.Hkv, lane, move_v[w], move_i[w]);
}

struct TopkItems {
  NsaTopk p;
  __device__ void operator()(int64_t i) const { nsa_topk_item<float>(p, i / p.Hkv, i % p.Hkv); }
};

// The item of each problem, in float.
__device__ inline void item(const NsaCompression& p, int64_t t, int64_t h, int64_t v0) {
  nsa_compression_item<float>(p, t, h, v0);
}
__device__ inline void item(const NsaSelection& p, int64_t t, int64_t h, int64_t v0) {
  nsa_selection_item<float>(p, t, h, v0);
}
__device__ inline void item(const DsaDecode& p, int64_t r, int64_t h, int64_t v0) { dsa_decode_item<float>(p, r, h, v0); }

// Item i of a problem whose items are (row, head, slice of kSlice value columns), S slices a head.
template <class Problem>
struct SlicedItems {
  Problem p;
  int64_t S;
  __device__ void operator()(int64_t i) const {
    const int64_t rh = i / S;
    item(p, rh / p.H, rh % p.H, (i % S) * kSlice);
  }
};

struct IndexerItems {
  Indexer p;
  __device__ void operator()(int64_t i) const { indexer_item<float>(p, i / p.Sk, i % p.Sk); }
};

// The indexer's block (x: the query pair, so that the pairs reading one chunk of keys run side by side; y:
// the chunk of keys).
template <bool kFp8>
__global__ void __launch_bounds__(kIdxThreads) indexer_mma(Indexer p) {
  extern __shared__ __align__(16) unsigned char smem[];
  IndexerBlock(p, blockIdx.y, blockIdx.x).run_on_device<kFp8>(smem);
}

// DSA on the tensor-core block: x the group of 16 query heads (so the groups of one query row, which read
// the same cache rows, run side by side), y the query row, z the KV head and the split (z = split Hkv + hk).
// Its shared memory fits two blocks an SM, so the registers may run to 128 a thread.
template <int kD, int kDtype>
__global__ void __launch_bounds__(32 * kLatentWarps, 2) dsa_mma(DsaDecode p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const DsaSource<kD - 64> source(p, blockIdx.x, blockIdx.y, blockIdx.z % p.Hkv, blockIdx.z / p.Hkv);
  ak::attention::tiled::MmaBlock<DsaSource<kD - 64>, kD, kDtype, kLatentWarps>(source).run_on_device(smem);
}

// The splits' merge: a block per (query row, head).
template <int kUnused = 0>
__global__ void combine_latent_splits(DsaDecode p) {
  extern __shared__ float merge_smem[];
  const int64_t at = blockIdx.x;  // x H + h
  ak::attention::tiled::merge_split_row(p.partial_lse + at, p.partial + at * p.D, p.B * p.Sq * p.H, p.splits, p.D,
                                        merge_smem, [&](int64_t c, float o) { store(p.output, p.dtype, at * p.D + c, o); });
}

}  // namespace kernels

// A latent decode kernel (the mma.sync block, the Hopper kernel) under the caller's split of the lists: with
// more than one split, scratch memory for the splits' partial outputs and log-sum-exps set in the problem
// that `launch(p)` receives, then their merge.
template <class Launch>
void launch_latent_splits(DsaDecode p, cudaStream_t stream, const char* name, const Launch& launch) {
  int device = 0;
  AK_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t rows = p.B * p.Sq * p.H;
  ::ak::cuda::Scratch scratch(device, p.splits > 1 ? static_cast<size_t>(p.splits * rows * (p.D + 1)) * 4 : 0);
  if (p.splits > 1) p.partial = scratch.as<float>(), p.partial_lse = p.partial + p.splits * rows * p.D;
  launch(p);
  ::ak::cuda::check_launch(name);
  if (p.splits == 1) return;
  const int merge_smem = ak::attention::tiled::split_merge_bytes(p.splits);
  kernels::combine_latent_splits<0><<<static_cast<unsigned>(rows), 128, merge_smem, stream>>>(p);
  ::ak::cuda::check_launch((std::string(name) + " (combine)").c_str());
}

namespace tb = ak::attention::tiled;

template <class T, int D, int Tile>
void CompressionTiled<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int smem = static_cast<int>(tb::Shared::bytes(p.H / p.Hkv, D));
  kernels::launch_tiled<tb::Block, CompressionSource, D>(p, smem, stream, "sparse.nsa.compression.tiled");
}

template <class T, int D, int Tile>
void CompressionMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int smem = static_cast<int>(tb::MmaShared::bytes(D));
  kernels::launch_tiled<tb::MmaBlockOf<tb::kHalfDtype<T>>::template Block, CompressionSource, D>(
      p, smem, stream, "sparse.nsa.compression.mma");
}

template <class T, int D, int Tile>
void CompressionItem<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int64_t S = value_slices(p.V);
  kernels::launch_items(p.seq.T * p.H * S, kernels::SlicedItems<NsaCompression>{p, S}, stream, "sparse.nsa.compression.item");
}

template <class T, int D, int Tile>
void SelectionTiled<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int smem = static_cast<int>(tb::Shared::bytes(p.H / p.Hkv, D));
  kernels::launch_tiled<tb::Block, SelectionSource, D>(p, smem, stream, "sparse.nsa.selection.tiled");
}

template <class T, int D, int Tile>
void SelectionMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int smem = static_cast<int>(tb::MmaShared::bytes(D));
  kernels::launch_tiled<tb::MmaBlockOf<tb::kHalfDtype<T>>::template Block, SelectionSource, D>(
      p, smem, stream, "sparse.nsa.selection.mma");
}

template <class T, int D, int Tile>
void SelectionItem<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int64_t S = value_slices(p.V);
  kernels::launch_items(p.seq.T * p.H * S, kernels::SlicedItems<NsaSelection>{p, S}, stream, "sparse.nsa.selection.item");
}

template <class T, int D, int Tile>
void DsaMma<T, D, Tile>::launch(const Args& args, cudaStream_t stream) {
  // Split by the caller (cuda.cu).
  launch_latent_splits(args, stream, "sparse.dsa.decode.mma", [&](const DsaDecode& p) {
    const int smem = static_cast<int>(tb::MmaShared::bytes(D, true));
    auto* const kernel = kernels::dsa_mma<D, tb::kHalfDtype<T>>;
    AK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(static_cast<unsigned>(DsaSource<>::groups(p)), static_cast<unsigned>(p.B * p.Sq),
                    static_cast<unsigned>(p.Hkv * p.splits));
    kernel<<<grid, 32 * kLatentWarps, smem, stream>>>(p);
  });
}

template <class T, int D, int Tile>
void DsaItem<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int64_t S = value_slices(p.D);
  kernels::launch_items(p.B * p.Sq * p.H * S, kernels::SlicedItems<DsaDecode>{p, S}, stream, "sparse.dsa.decode.item");
}

template <class T, int D, int Tile>
void NsaTopkMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  const int64_t items = p.seq.T * p.Hkv;
  if (items == 0) return;
  kernels::topk_mma<D><<<static_cast<unsigned>((items + kTopkWarps - 1) / kTopkWarps), kTopkThreads, 0, stream>>>(p);
  ::ak::cuda::check_launch("sparse.nsa.topk.mma");
}

template <class T, int D, int Tile>
void NsaTopkItem<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  kernels::launch_items(p.seq.T * p.Hkv, kernels::TopkItems{p}, stream, "sparse.nsa.topk.item");
}

template <class T, int D, int Tile>
void IndexerMma<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_e4m3>;
  const int smem = static_cast<int>(indexer_shared_bytes(p.dtype));
  AK_CUDA_CHECK(cudaFuncSetAttribute(kernels::indexer_mma<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.Sq + kIdxQueries - 1) / kIdxQueries),
                  static_cast<unsigned>((p.Sk + kIdxChunk - 1) / kIdxChunk));
  kernels::indexer_mma<kFp8><<<grid, kIdxThreads, smem, stream>>>(p);
  ::ak::cuda::check_launch("sparse.indexer.mma");
}

template <class T, int D, int Tile>
void IndexerItem<T, D, Tile>::launch(const Args& p, cudaStream_t stream) {
  kernels::launch_items(p.Sq * p.Sk, kernels::IndexerItems{p}, stream, "sparse.indexer.item");
}

}  // namespace ak::sparse::cuda
