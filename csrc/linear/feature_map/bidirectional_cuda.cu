// The CUDA backend of the fused bidirectional feature map (bidirectional.h): the passes of
// bidirectional_kernels.cuh, sized for several waves of blocks.
// - forward: sums (the keys' features against [v | 1]), then apply (every query, divided);
// - backward: the forward's sums; apply (Grad) for r = dO / D and dD; sums of the queries' features
//   against [r | dD]; trans twice (dq from r and the sums, dk from v and the gradient sums); apply for
//   dv. Without the normaliser r is dO and there is no column V.
// Values are carried times T where that keeps float16 in range (m_scale = 1 / T undoes it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/runtime.cuh"
#include "linear/feature_map/backend.h"
#include "linear/feature_map/bidirectional_kernels.cuh"

namespace ak::linear::feature_map::cuda {
namespace {

using ak::cuda::check;
using ak::cuda::check_launch;
using ak::cuda::DeviceGuard;
using ak::cuda::stream;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Seq seq_of(const BidirectionalArgs& a, const FloatView& t) {
  return {t.data, a.batch_stride(t), a.token_stride(t), a.head_stride(t)};
}

// A [seq, T, V] contiguous buffer as a Seq over (batch, token, head).
Seq packed_rows(void* data, const BidirectionalArgs& a) {
  return {data, a.heads * a.tokens * a.v_dim, a.v_dim, a.tokens * a.v_dim};
}

struct Launcher {
  const BidirectionalArgs& a;
  cudaStream_t s;
  int64_t sms, chunks, seqs;

  explicit Launcher(const BidirectionalArgs& args)
      : a(args),
        s(stream(args.device)),
        sms(ak::cuda::props(args.device).multiProcessorCount),
        chunks(ceil_div(args.tokens, kTile)),
        seqs(args.batch * args.heads) {}

  Params base() const {
    Params p;
    p.cos = a.cos;
    p.sin = a.sin;
    p.tokens = a.tokens;
    p.heads = a.heads;
    p.k_dim = a.k_dim;
    p.features = a.features;
    p.v_dim = a.v_dim;
    p.phi = a.phi;
    p.normalised = a.normalised;
    p.eps = a.eps;
    p.m_scale = 1.f / static_cast<float>(std::max<int64_t>(1, a.tokens));
    return p;
  }

  // Token groups for `per_seq` blocks a sequence: enough blocks for several waves.
  int64_t tiles_per_group(int64_t per_seq, int64_t waves) const {
    const int64_t groups = std::clamp<int64_t>(ceil_div(waves * sms, per_seq * seqs), 1, chunks);
    return ceil_div(chunks, groups);
  }

  template <class T, int VT>
  void sums(Params p) const {
    const int64_t tiles = (a.features / kTile) * (a.v_dim / VT), per_seq = a.features * (a.v_dim + 1);
    p.chunks_per_split = tiles_per_group(tiles, 8);
    p.splits = ceil_div(chunks, p.chunks_per_split);
    ak::cuda::Scratch partial(a.device, static_cast<size_t>(seqs * p.splits * per_seq) * sizeof(float));
    p.partial = partial.as<float>();
    const dim3 grid(static_cast<unsigned>(tiles * seqs), static_cast<unsigned>(p.splits));
    sums_kernel<T, VT><<<grid, kThreads, 0, s>>>(p);
    check_launch("fmap_bidirectional_sums");
    const int64_t blocks = std::min<int64_t>(ceil_div(seqs * per_seq, kThreads), 8 * sms);
    reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(p, seqs);
    check_launch("fmap_bidirectional_reduce");
  }

  template <class T, int VT, bool Grad>
  void apply(Params p) const {
    const int64_t vtiles = a.v_dim / VT;
    p.tiles_per_group = tiles_per_group(vtiles, 4);
    const size_t smem = apply_smem(a.features, VT);
    check(cudaFuncSetAttribute(apply_kernel<T, VT, Grad>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "fmap_bidirectional_apply smem");
    const dim3 grid(static_cast<unsigned>(vtiles * seqs), static_cast<unsigned>(ceil_div(chunks, p.tiles_per_group)));
    apply_kernel<T, VT, Grad><<<grid, kThreads, smem, s>>>(p);
    check_launch("fmap_bidirectional_apply");
  }

  template <class T, bool Weighted>
  void trans_as(const Params& p, const dim3& grid) const {
    const size_t smem = trans_smem(a.v_dim, Weighted);
    check(cudaFuncSetAttribute(trans_kernel<T, Weighted>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "fmap_bidirectional_trans smem");
    trans_kernel<T, Weighted><<<grid, kThreads, smem, s>>>(p);
    check_launch("fmap_bidirectional_trans");
  }

  template <class T>
  void trans(Params p) const {
    const int64_t ctiles = a.k_dim / kTile;
    p.tiles_per_group = tiles_per_group(ctiles, 4);
    const dim3 grid(static_cast<unsigned>(ctiles * seqs), static_cast<unsigned>(ceil_div(chunks, p.tiles_per_group)));
    if (a.cos != nullptr) {
      trans_as<T, true>(p, grid);
    } else {
      trans_as<T, false>(p, grid);
    }
  }

  // The forward's sums Y = X(k)^T [v | 1] into a.sums; returns the parameters the later passes start from.
  template <class T, int VT>
  Params key_sums() const {
    Params p = base();
    p.m = a.sums;
    p.x = seq_of(a, a.k);
    p.z = seq_of(a, a.v);
    p.extra = a.normalised;
    sums<T, VT>(p);
    return p;
  }
};

template <class T, int VT>
void forward(const BidirectionalArgs& a) {
  const Launcher l(a);
  Params p = l.key_sums<T, VT>();
  p.x = seq_of(a, a.q);
  p.out = seq_of(a, a.out);
  p.out_scale = 1.f / p.m_scale;
  l.apply<T, VT, false>(p);
}

template <class T, int VT>
void backward(const BidirectionalGradArgs& g) {
  const BidirectionalArgs& a = g.forward;
  const Launcher l(a);
  const Params p = l.key_sums<T, VT>();
  // The rows the queries' gradient flows through: r (and dD), or dO itself.
  Seq rows = seq_of(a, g.d_output);
  if (a.normalised) {
    Params q = p;
    q.x = seq_of(a, a.q);
    q.d_out = rows;
    q.r_rows = packed_rows(g.r_rows, a);
    q.dd = g.dd;
    l.apply<T, VT, true>(q);
    rows = q.r_rows;
  }
  const float out_scale = a.normalised ? 1.f : 1.f / p.m_scale;
  // The gradient sums: the queries' features against [r | dD].
  Params d = p;
  d.m = g.d_sums;
  d.x = seq_of(a, a.q);
  d.z = rows;
  d.weight = a.normalised ? g.dd : nullptr;
  l.sums<T, VT>(d);
  // The gradient of x (q or k): `through` rows against M, back through the features.
  const auto gradient = [&](const FloatView& x, const Seq& through, float* m, const float* weight,
                            const FloatView& dx) {
    Params t = p;
    t.m = m;
    t.a = through;
    t.weight = weight;
    t.x = seq_of(a, x);
    t.out = seq_of(a, dx);
    t.out_scale = out_scale;
    l.trans<T>(t);
  };
  gradient(a.q, rows, a.sums, a.normalised ? g.dd : nullptr, g.dq);  // r against the forward's sums
  gradient(a.k, seq_of(a, a.v), g.d_sums, nullptr, g.dk);            // v against the gradient sums (and ones)
  // dv: the keys' features against the gradient sums.
  Params dv = p;
  dv.m = g.d_sums;
  dv.x = seq_of(a, a.k);
  dv.out = seq_of(a, g.dv);
  dv.normalised = false;
  dv.out_scale = out_scale;
  l.apply<T, VT, false>(dv);
}

template <class T>
void forward_dtype(const BidirectionalArgs& a) {
  DeviceGuard guard(a.device);
  if (a.v_dim % 128 == 0) {
    forward<T, 128>(a);
  } else {
    forward<T, 64>(a);
  }
}

template <class T>
void backward_dtype(const BidirectionalGradArgs& g) {
  DeviceGuard guard(g.forward.device);
  if (g.forward.v_dim == 128) {
    backward<T, 128>(g);
  } else {
    backward<T, 64>(g);
  }
}

}  // namespace

void bidirectional(const BidirectionalArgs& a) {
  if (a.q.dtype == AK_FLOAT16) {
    forward_dtype<__half>(a);
  } else {
    forward_dtype<__nv_bfloat16>(a);
  }
}

void bidirectional_grad(const BidirectionalGradArgs& g) {
  if (g.forward.q.dtype == AK_FLOAT16) {
    backward_dtype<__half>(g);
  } else {
    backward_dtype<__nv_bfloat16>(g);
  }
}

}  // namespace ak::linear::feature_map::cuda
