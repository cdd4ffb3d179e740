// The general CUDA kernels of the sparse-attention ops: a thread per item of rows.h, in float. They
// serve every shape the entries accept; faster kernels for the common shapes come before them in the
// entries' dispatch once they exist.
#include "cuda/runtime.cuh"
#include "sparse/backend.h"
#include "sparse/rows.h"

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
  const int64_t S = slices(p.V);
  launch(device, p.seq.T * p.H * S, CompressionItem{p, S}, "nsa_compression");
}

void nsa_topk(const NsaTopk& p, int device) { launch(device, p.seq.T * p.Hkv, TopkItem{p}, "nsa_topk"); }

void nsa_selection(const NsaSelection& p, int device) {
  const int64_t S = slices(p.V);
  launch(device, p.seq.T * p.H * S, SelectionItem{p, S}, "nsa_selection");
}

void dsa_decode(const DsaDecode& p, int device) {
  const int64_t S = slices(p.D);
  launch(device, p.B * p.Sq * p.H * S, DecodeItem{p, S}, "dsa_decode");
}

void indexer(const Indexer& p, int device) { launch(device, p.Sq * p.Sk, IndexerItem{p}, "lightning_indexer"); }

}  // namespace ak::sparse::cuda
