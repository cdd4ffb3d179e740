// The CUDA kernels of the sparse-attention ops: the tiled attention block per (token, KV head) for the NSA
// branches it serves (16-bit, K = V of 64 / 128 / 256, G K <= 4096), else a thread per item of rows.h, in
// float, which serves every shape the entries accept.
#include "cuda/runtime.cuh"
#include "sparse/backend.h"
#include "sparse/rows.h"
#include "sparse/tiled.h"

namespace ak::sparse::cuda {

namespace {

constexpr int kThreads = 128;

int64_t slices(int64_t width) { return (width + kSlice - 1) / kSlice; }

// Runs body(i) for every item i < n, a thread each, on the device's stream.
template <class Body>
__global__ void each_item(int64_t n, Body body) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) body(i);
}

struct CompressionItem {
  NsaCompression p;
  int64_t S;
  __device__ void operator()(int64_t i) const {
    const int64_t th = i / S;
    nsa_compression_item<float>(p, th / p.H, th % p.H, (i % S) * kSlice);
  }
};
struct TopkItem {
  NsaTopk p;
  __device__ void operator()(int64_t i) const { nsa_topk_item<float>(p, i / p.Hkv, i % p.Hkv); }
};
struct SelectionItem {
  NsaSelection p;
  int64_t S;
  __device__ void operator()(int64_t i) const {
    const int64_t th = i / S;
    nsa_selection_item<float>(p, th / p.H, th % p.H, (i % S) * kSlice);
  }
};
struct DecodeItem {
  DsaDecode p;
  int64_t S;
  __device__ void operator()(int64_t i) const {
    const int64_t rh = i / S;
    dsa_decode_item<float>(p, rh / p.H, rh % p.H, (i % S) * kSlice);
  }
};
struct IndexerItem {
  Indexer p;
  __device__ void operator()(int64_t i) const { indexer_item<float>(p, i / p.Sk, i % p.Sk); }
};

// A tiled attention block per (token, KV head): Source from the problem and the block's indices.
template <class Source, class Problem>
__global__ void __launch_bounds__(ak::attention::tiled::kThreads) tiled_kernel(Problem p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Source source(p, blockIdx.x, blockIdx.y);
  ak::attention::tiled::Block<Source>(source).run_on_device(smem);
}

template <class Source, class Problem>
void launch_tiled(int device, const Problem& p, const char* name) {
  if (p.seq.T == 0) return;
  ak::cuda::DeviceGuard guard(device);
  namespace tiled = ak::attention::tiled;
  const int smem = static_cast<int>(tiled::Shared::bytes(p.H / p.Hkv, p.K));
  AK_CUDA_CHECK(cudaFuncSetAttribute(tiled_kernel<Source, Problem>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>(p.seq.T), static_cast<unsigned>(p.Hkv));
  tiled_kernel<Source, Problem><<<grid, tiled::kThreads, smem, ak::cuda::stream(device)>>>(p);
  ak::cuda::check_launch(name);
}

template <class Body>
void launch(int device, int64_t n, const Body& body, const char* name) {
  if (n == 0) return;
  ak::cuda::DeviceGuard guard(device);
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  each_item<<<static_cast<unsigned>(blocks), kThreads, 0, ak::cuda::stream(device)>>>(n, body);
  ak::cuda::check_launch(name);
}

}  // namespace

void nsa_compression(const NsaCompression& p, int device) {
  if (p.tiled) return launch_tiled<CompressionSource>(device, p, "nsa_compression_tiled");
  const int64_t S = slices(p.V);
  launch(device, p.seq.T * p.H * S, CompressionItem{p, S}, "nsa_compression");
}

void nsa_topk(const NsaTopk& p, int device) { launch(device, p.seq.T * p.Hkv, TopkItem{p}, "nsa_topk"); }

void nsa_selection(const NsaSelection& p, int device) {
  if (p.tiled) return launch_tiled<SelectionSource>(device, p, "nsa_selection_tiled");
  const int64_t S = slices(p.V);
  launch(device, p.seq.T * p.H * S, SelectionItem{p, S}, "nsa_selection");
}

void dsa_decode(const DsaDecode& p, int device) {
  const int64_t S = slices(p.D);
  launch(device, p.B * p.Sq * p.H * S, DecodeItem{p, S}, "dsa_decode");
}

void indexer(const Indexer& p, int device) { launch(device, p.Sq * p.Sk, IndexerItem{p}, "lightning_indexer"); }

}  // namespace ak::sparse::cuda
