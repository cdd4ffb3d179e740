// The C entries of the sparse-attention ops: every argument checked (the messages name it), the offsets
// read back and checked, the index lists too when the caller asks, then the call dispatched by device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "sparse/backend.h"
#include "sparse/problem.h"
#include "sparse/planner.h"
#if AK_WITH_CUDA
#include "cuda/backend.h"
#endif

using namespace ak;
using namespace ak::sparse;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A contiguous tensor of the given rank and dtypes on ref's device (ref: null for the first one).
const ak_tensor& operand(const ak_tensor* t_, const char* name, int32_t rank, std::initializer_list<int32_t> dtypes,
                         const ak_tensor* ref, const char* ref_name) {
  const ak_tensor& t = check_contiguous(t_, name);
  check_dtype(t, name, dtypes);
  require(t.rank == rank, std::string(name) + ": expected rank " + str(rank) + ", got " + shape_string(t));
  if (ref) check_same_device(t, name, *ref, ref_name);
  else check_device(t, name);
  return t;
}

void expect_dims(const ak_tensor& t, const char* name, const std::vector<int64_t>& dims, const char* what) {
  require(std::equal(dims.begin(), dims.end(), t.shape, t.shape + t.rank),
          std::string(name) + ": expected " + what + ", got " + shape_string(t));
}

std::string dims_text(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s = "[";
  for (const auto& [n, v] : dims) s += (s.size() > 1 ? ", " : "") + std::string(n) + "=" + str(v);
  return s + "]";
}

// The elements of an int32 tensor on the host (a synchronous copy for a CUDA tensor; none while capturing).
std::vector<int32_t> host_ints(const ak_tensor& t, const char* name) {
  std::vector<int32_t> out(static_cast<size_t>(numel(t)));
  if (out.empty()) return out;
  const int64_t bytes = static_cast<int64_t>(out.size() * sizeof(int32_t));
  if (t.device_type == AK_CPU) {
    std::memcpy(out.data(), t.data, static_cast<size_t>(bytes));
  } else {
#if AK_WITH_CUDA
    ak::cuda::refuse_while_capturing(t.device_index, name);
#endif
    AK_CUDA_CALL(ak::cuda::copy_to_host(t, out.data(), bytes));
  }
  return out;
}

// Offsets of N packed sequences over T tokens, read back and checked; the device copy goes to the kernels.
Packed packed(const ak_tensor* offsets_, const ak_tensor& ref, int64_t T, std::vector<int64_t>& host) {
  const ak_tensor& o = operand(offsets_, "offsets", 1, {AK_INT32}, &ref, "q");
  require(o.shape[0] >= 2, "offsets: expected [N + 1] with N >= 1 sequences, got " + shape_string(o));
#if AK_WITH_CUDA
  if (o.device_type != AK_CPU) ak::cuda::refuse_while_capturing(o.device_index, "offsets");
#endif
  host = read_offsets(offsets_, "offsets", ref, T, "q");
  Packed p;
  p.offsets = static_cast<const int32_t*>(o.data);
  p.N = o.shape[0] - 1, p.T = T;
  return p;
}

// Compressed-row offsets: 0 first, nondecreasing, within the C rows, and room for what the last token sees.
void chunk_offsets(Packed& p, const ak_tensor* chunk_, const ak_tensor& ref, const std::vector<int64_t>& offsets,
                   int64_t C, int64_t block, int64_t stride) {
  const ak_tensor& c = operand(chunk_, "chunk_offsets", 1, {AK_INT32}, &ref, "q");
  require(c.shape[0] == p.N + 1, "chunk_offsets: expected [N + 1=" + str(p.N + 1) + "] like offsets, got " +
                                     shape_string(c));
  const std::vector<int32_t> h = host_ints(c, "chunk_offsets");
  require(h[0] == 0, "chunk_offsets: must start at 0, got " + str(h[0]));
  for (int64_t n = 0; n < p.N; n++) {
    const int64_t len = offsets[n + 1] - offsets[n];
    const int64_t need = len == 0 ? 0 : (len < block ? 0 : (len - block) / stride + 1);
    require(h[n + 1] >= h[n], "chunk_offsets: must be nondecreasing, but entry " + str(n + 1) + " (" + str(h[n + 1]) +
                                  ") is below entry " + str(n) + " (" + str(h[n]) + ")");
    require(h[n + 1] - h[n] >= need, "chunk_offsets: sequence " + str(n) + " (" + str(len) + " tokens) needs " +
                                         str(need) + " compressed rows, its offsets give " + str(h[n + 1] - h[n]));
  }
  require(h[p.N] <= C, "chunk_offsets: the last offset " + str(h[p.N]) + " exceeds the " + str(C) +
                           " compressed rows of k_cmp");
  p.chunk_offsets = static_cast<const int32_t*>(c.data);
}

bool on_cpu(const ak_tensor& t) { return t.device_type == AK_CPU; }

// The block an NSA branch runs on the CPU: the planner's, under the tuning table in force.
std::string variant(const char* stage, int32_t dtype, int64_t H, int64_t Hkv, int64_t K, int64_t V,
                    std::initializer_list<const void*> data) {
  planning::NsaShape s;
  s.stage = stage, s.dtype = dtype, s.d = K, s.dv = V, s.hq = H, s.hkv = Hkv;
  for (const void* d : data) s.aligned = s.aligned && reinterpret_cast<uintptr_t>(d) % 16 == 0;
  return planning::pick_nsa(s, tuning::current());
}

NsaBlock nsa_block(const std::string& variant) {
  if (variant == "tiled") return NsaBlock::tiled;
  if (variant == "mma") return NsaBlock::mma;
  return NsaBlock::item;
}

constexpr std::initializer_list<int32_t> kFloats = {AK_FLOAT16, AK_BFLOAT16, AK_FLOAT32};

// Runs a checked latent decode (DSA or MLA) on q's device. Each backend chooses the kernel before the early
// return of an empty call, so that a forced kernel that cannot serve is refused on every call.
void latent_decode(DsaDecode& p, const ak_tensor& q) {
  if (!on_cpu(q)) {
    AK_CUDA_CALL(ak::sparse::cuda::dsa_decode(p, q.device_index));
    return;
  }
  p.mma = planning::pick_dsa(planning::shape_of(p), tuning::current()) == "mma";
  if (p.B * p.Sq * p.H > 0) ak::sparse::cpu::dsa_decode(p);
}

}  // namespace

extern "C" {

AK_API ak_status ak_nsa_compression_fwd(const ak_tensor* q_, const ak_tensor* k_cmp, const ak_tensor* v_cmp,
                                        const ak_tensor* offsets, const ak_tensor* chunk_offsets_,
                                        int64_t block_size, int64_t stride, double scale, const ak_tensor* output,
                                        const ak_tensor* lse) {
  AK_ENTRY("ak_nsa_compression_fwd", {
    NsaCompression p;
    const ak_tensor& q = operand(q_, "q", 3, kFloats, nullptr, nullptr);
    const ak_tensor& k = operand(k_cmp, "k_cmp", 3, kFloats, &q, "q");
    const ak_tensor& v = operand(v_cmp, "v_cmp", 3, kFloats, &q, "q");
    check_same_dtype(k, "k_cmp", q, "q"), check_same_dtype(v, "v_cmp", q, "q");
    p.H = q.shape[1], p.K = q.shape[2], p.C = k.shape[0], p.Hkv = k.shape[1], p.V = v.shape[2];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0,
            "k_cmp: its " + str(p.Hkv) + " heads must divide the " + str(p.H) + " heads of q");
    expect_dims(k, "k_cmp", {p.C, p.Hkv, p.K}, ("[C, Hkv, K=" + str(p.K) + "]").c_str());
    expect_dims(v, "v_cmp", {p.C, p.Hkv, p.V}, dims_text({{"C", p.C}, {"Hkv", p.Hkv}, {"V", p.V}}).c_str());
    require(block_size >= 1, "block_size: expected >= 1, got " + str(block_size));
    require(stride >= 1 && stride <= block_size,
            "stride: expected 1 <= stride <= block_size=" + str(block_size) + ", got " + str(stride));
    require(std::isfinite(scale), "scale: expected a finite number");
    std::vector<int64_t> host;
    p.seq = packed(offsets, q, q.shape[0], host);
    chunk_offsets(p.seq, chunk_offsets_, q, host, p.C, block_size, stride);
    const ak_tensor& o = operand(output, "output", 3, kFloats, &q, "q");
    check_same_dtype(o, "output", q, "q");
    expect_dims(o, "output", {p.seq.T, p.H, p.V}, dims_text({{"T", p.seq.T}, {"H", p.H}, {"V", p.V}}).c_str());
    const ak_tensor& l = operand(lse, "lse", 2, {AK_FLOAT32}, &q, "q");
    expect_dims(l, "lse", {p.seq.T, p.H}, dims_text({{"T", p.seq.T}, {"H", p.H}}).c_str());
    p.q = q.data, p.k_cmp = k.data, p.v_cmp = v.data, p.output = o.data, p.lse = static_cast<float*>(l.data);
    p.dtype = q.dtype, p.block = block_size, p.stride = stride, p.scale = scale;
    const std::string block = variant("sparse.nsa.compression", p.dtype, p.H, p.Hkv, p.K, p.V, {p.q, p.k_cmp, p.v_cmp});
    p.kernel = nsa_block(block);
    if (p.seq.T == 0 || p.H == 0 || p.V == 0) return;
    if (on_cpu(q)) ak::sparse::cpu::nsa_compression(p);
    else AK_CUDA_CALL(ak::sparse::cuda::nsa_compression(p, q.device_index));
  });
}

AK_API ak_status ak_nsa_topk(const ak_tensor* q_, const ak_tensor* k_cmp, const ak_tensor* lse,
                             const ak_tensor* offsets, const ak_tensor* chunk_offsets_, int64_t block_size,
                             double scale, const ak_tensor* block_indices) {
  AK_ENTRY("ak_nsa_topk", {
    NsaTopk p;
    const ak_tensor& q = operand(q_, "q", 3, kFloats, nullptr, nullptr);
    const ak_tensor& k = operand(k_cmp, "k_cmp", 3, kFloats, &q, "q");
    check_same_dtype(k, "k_cmp", q, "q");
    p.H = q.shape[1], p.K = q.shape[2], p.C = k.shape[0], p.Hkv = k.shape[1];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0,
            "k_cmp: its " + str(p.Hkv) + " heads must divide the " + str(p.H) + " heads of q");
    expect_dims(k, "k_cmp", {p.C, p.Hkv, p.K}, ("[C, Hkv, K=" + str(p.K) + "]").c_str());
    require(block_size >= 1, "block_size: expected >= 1, got " + str(block_size));
    require(std::isfinite(scale), "scale: expected a finite number");
    std::vector<int64_t> host;
    p.seq = packed(offsets, q, q.shape[0], host);
    chunk_offsets(p.seq, chunk_offsets_, q, host, p.C, block_size, block_size);
    const ak_tensor& l = operand(lse, "lse", 2, {AK_FLOAT32}, &q, "q");
    expect_dims(l, "lse", {p.seq.T, p.H}, dims_text({{"T", p.seq.T}, {"H", p.H}}).c_str());
    const ak_tensor& out = operand(block_indices, "block_indices", 3, {AK_INT32}, &q, "q");
    p.S = out.shape[2];
    require(p.S >= 1 && p.S <= kMaxSelectedBlocks,
            "block_indices: expected 1 to " + str(kMaxSelectedBlocks) + " selected blocks, got " + str(p.S));
    expect_dims(out, "block_indices", {p.seq.T, p.Hkv, p.S},
                dims_text({{"T", p.seq.T}, {"Hkv", p.Hkv}, {"S", p.S}}).c_str());
    p.q = q.data, p.k_cmp = k.data, p.lse = static_cast<const float*>(l.data);
    p.indices = static_cast<int32_t*>(out.data);
    p.dtype = q.dtype, p.block = block_size, p.scale = scale;
    // Each backend chooses before the early return of an empty call, so that a forced kernel that cannot
    // serve is refused on every call.
    if (!on_cpu(q)) {
      AK_CUDA_CALL(ak::sparse::cuda::nsa_topk(p, q.device_index));
      return;
    }
    p.mma = planning::pick_topk(planning::shape_of(p), tuning::current()) == "mma";
    if (p.seq.T > 0 && p.Hkv > 0) ak::sparse::cpu::nsa_topk(p);
  });
}

AK_API ak_status ak_nsa_selection_fwd(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* v_,
                                      const ak_tensor* block_indices, const ak_tensor* block_counts,
                                      const ak_tensor* offsets, int64_t block_size, double scale, int32_t flags,
                                      const ak_tensor* output, const ak_tensor* lse) {
  AK_ENTRY("ak_nsa_selection_fwd", {
    NsaSelection p;
    require((flags & ~(AK_SPARSE_CAUSAL | AK_SPARSE_CHECK_INDICES)) == 0,
            "flags: expected AK_SPARSE_CAUSAL = 1 | AK_SPARSE_CHECK_INDICES = 2, got " + str(flags));
    const ak_tensor& q = operand(q_, "q", 3, kFloats, nullptr, nullptr);
    const ak_tensor& k = operand(k_, "k", 3, kFloats, &q, "q");
    const ak_tensor& v = operand(v_, "v", 3, kFloats, &q, "q");
    check_same_dtype(k, "k", q, "q"), check_same_dtype(v, "v", q, "q");
    const int64_t T = q.shape[0];
    p.H = q.shape[1], p.K = q.shape[2], p.Hkv = k.shape[1], p.V = v.shape[2];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0, "k: its " + str(p.Hkv) + " heads must divide the " + str(p.H) +
                                                " heads of q");
    expect_dims(k, "k", {T, p.Hkv, p.K}, dims_text({{"T", T}, {"Hkv", p.Hkv}, {"K", p.K}}).c_str());
    expect_dims(v, "v", {T, p.Hkv, p.V}, dims_text({{"T", T}, {"Hkv", p.Hkv}, {"V", p.V}}).c_str());
    require(block_size >= 1, "block_size: expected >= 1, got " + str(block_size));
    require(std::isfinite(scale), "scale: expected a finite number");
    std::vector<int64_t> host;
    p.seq = packed(offsets, q, T, host);
    const ak_tensor& bi = operand(block_indices, "block_indices", 3, {AK_INT32}, &q, "q");
    p.S = bi.shape[2];
    expect_dims(bi, "block_indices", {T, p.Hkv, p.S}, dims_text({{"T", T}, {"Hkv", p.Hkv}, {"S", p.S}}).c_str());
    const ak_tensor* bc = nullptr;
    if (block_counts) {
      bc = &operand(block_counts, "block_counts", 2, {AK_INT32}, &q, "q");
      expect_dims(*bc, "block_counts", {T, p.Hkv}, dims_text({{"T", T}, {"Hkv", p.Hkv}}).c_str());
    }
    const ak_tensor& o = operand(output, "output", 3, kFloats, &q, "q");
    check_same_dtype(o, "output", q, "q");
    expect_dims(o, "output", {T, p.H, p.V}, dims_text({{"T", T}, {"H", p.H}, {"V", p.V}}).c_str());
    if (lse) {
      const ak_tensor& l = operand(lse, "lse", 2, {AK_FLOAT32}, &q, "q");
      expect_dims(l, "lse", {T, p.H}, dims_text({{"T", T}, {"H", p.H}}).c_str());
      p.lse = static_cast<float*>(l.data);
    }
    if (flags & AK_SPARSE_CHECK_INDICES) {
      const std::vector<int32_t> list = host_ints(bi, "block_indices");
      const std::vector<int32_t> counts = bc ? host_ints(*bc, "block_counts") : std::vector<int32_t>();
      std::vector<int32_t> seen;
      for (int64_t n = 0; n < p.seq.N; n++) {
        const int64_t len = host[n + 1] - host[n], blocks = (len + block_size - 1) / block_size;
        for (int64_t t = host[n]; t < host[n + 1]; t++) {
          for (int64_t hk = 0; hk < p.Hkv; hk++) {
            const std::string at = "[" + str(t) + ", " + str(hk);
            const int64_t count = bc ? counts[t * p.Hkv + hk] : p.S;
            require(count >= 0 && count <= p.S,
                    "block_counts" + at + "]: expected 0 to " + str(p.S) + ", got " + str(count));
            seen.clear();
            for (int64_t e = 0; e < count; e++) {
              const int32_t b = list[(t * p.Hkv + hk) * p.S + e];
              if (b == -1) continue;
              require(b >= 0 && b < blocks, "block_indices" + at + ", " + str(e) + "]: " + str(b) +
                                                " is not a block of sequence " + str(n) + " (" + str(blocks) +
                                                " blocks; -1 pads)");
              require(std::find(seen.begin(), seen.end(), b) == seen.end(),
                      "block_indices" + at + ", " + str(e) + "]: block " + str(b) + " is listed twice");
              seen.push_back(b);
            }
          }
        }
      }
    }
    p.q = q.data, p.k = k.data, p.v = v.data, p.output = o.data;
    p.indices = static_cast<const int32_t*>(bi.data);
    p.counts = bc ? static_cast<const int32_t*>(bc->data) : nullptr;
    p.dtype = q.dtype, p.block = block_size, p.causal = (flags & AK_SPARSE_CAUSAL) != 0;
    const std::string block = variant("sparse.nsa.selection", p.dtype, p.H, p.Hkv, p.K, p.V, {p.q, p.k, p.v});
    p.kernel = nsa_block(block);
    p.scale = scale;
    if (T == 0 || p.H == 0) return;
    if (on_cpu(q)) ak::sparse::cpu::nsa_selection(p);
    else AK_CUDA_CALL(ak::sparse::cuda::nsa_selection(p, q.device_index));
  });
}

AK_API ak_status ak_dsa_decode(const ak_tensor* q_, const ak_tensor* kv_, const ak_tensor* indices, int64_t q_start,
                               int64_t stride_kv, double scale, int32_t flags, const ak_tensor* output) {
  AK_ENTRY("ak_dsa_decode", {
    DsaDecode p;
    require((flags & ~(AK_SPARSE_CAUSAL | AK_SPARSE_CHECK_INDICES)) == 0,
            "flags: expected AK_SPARSE_CAUSAL = 1 | AK_SPARSE_CHECK_INDICES = 2, got " + str(flags));
    const ak_tensor& q = operand(q_, "q", 4, kFloats, nullptr, nullptr);
    const ak_tensor& kv = operand(kv_, "kv", 4, kFloats, &q, "q");
    check_same_dtype(kv, "kv", q, "q");
    p.B = q.shape[0], p.Sq = q.shape[1], p.H = q.shape[2], p.Skv = kv.shape[1], p.Hkv = kv.shape[2];
    const int64_t width = q.shape[3];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0, "kv: its " + str(p.Hkv) + " heads must divide the " + str(p.H) +
                                                " heads of q");
    expect_dims(kv, "kv", {p.B, p.Skv, p.Hkv, width},
                dims_text({{"B", p.B}, {"Skv", p.Skv}, {"Hkv", p.Hkv}, {"D + tail", width}}).c_str());
    const ak_tensor& o = operand(output, "output", 4, kFloats, &q, "q");
    check_same_dtype(o, "output", q, "q");
    p.D = o.shape[3], p.tail = width - p.D;
    require(p.D >= 1 && p.tail >= 0, "output: expected [B, Sq, H, D] with 1 <= D <= " + str(width) + ", got " +
                                         shape_string(o));
    expect_dims(o, "output", {p.B, p.Sq, p.H, p.D},
                dims_text({{"B", p.B}, {"Sq", p.Sq}, {"H", p.H}, {"D", p.D}}).c_str());
    const ak_tensor& ix = operand(indices, "indices", 4, {AK_INT32}, &q, "q");
    p.topk = ix.shape[3];
    expect_dims(ix, "indices", {p.B, p.Sq, p.Hkv, p.topk},
                dims_text({{"B", p.B}, {"Sq", p.Sq}, {"Hkv", p.Hkv}, {"topk", p.topk}}).c_str());
    require(q_start >= 0, "q_start: expected >= 0, got " + str(q_start));
    require(stride_kv >= 1, "stride_kv: expected >= 1, got " + str(stride_kv));
    require(std::isfinite(scale), "scale: expected a finite number");
    if (flags & AK_SPARSE_CHECK_INDICES) {
      const std::vector<int32_t> list = host_ints(ix, "indices");
      std::vector<int32_t> row;
      for (int64_t r = 0; r < p.B * p.Sq * p.Hkv; r++) {
        row.clear();
        for (int64_t e = 0; e < p.topk; e++) {
          const int32_t j = list[r * p.topk + e];
          if (j >= 0 && j < p.Skv) row.push_back(j);
        }
        std::sort(row.begin(), row.end());
        const auto twice = std::adjacent_find(row.begin(), row.end());
        if (twice != row.end()) {
          const int64_t hk = r % p.Hkv, s = (r / p.Hkv) % p.Sq, b = r / (p.Hkv * p.Sq);
          fail(AK_ERR_INVALID_ARGUMENT, "indices[" + str(b) + ", " + str(s) + ", " + str(hk) + "]: cache row " +
                                            str(*twice) + " is listed twice");
        }
      }
    }
    p.q = q.data, p.kv = kv.data, p.indices = static_cast<const int32_t*>(ix.data), p.output = o.data;
    p.dtype = q.dtype, p.q_start = q_start, p.stride_kv = stride_kv, p.causal = (flags & AK_SPARSE_CAUSAL) != 0;
    p.scale = scale;
    latent_decode(p, q);
  });
}

AK_API ak_status ak_mla_decode(const ak_tensor* q_, const ak_tensor* q_pe, const ak_tensor* k_, const ak_tensor* k_pe,
                               double scale, const ak_tensor* output) {
  AK_ENTRY("ak_mla_decode", {
    DsaDecode p;
    const ak_tensor& q = operand(q_, "q", 3, {AK_FLOAT16, AK_BFLOAT16}, nullptr, nullptr);
    const ak_tensor& qp = operand(q_pe, "q_pe", 3, {AK_FLOAT16, AK_BFLOAT16}, &q, "q");
    const ak_tensor& k = operand(k_, "k", 4, {AK_FLOAT16, AK_BFLOAT16}, &q, "q");
    const ak_tensor& kp = operand(k_pe, "k_pe", 4, {AK_FLOAT16, AK_BFLOAT16}, &q, "q");
    check_same_dtype(qp, "q_pe", q, "q"), check_same_dtype(k, "k", q, "q"), check_same_dtype(kp, "k_pe", q, "q");
    p.B = q.shape[0], p.Sq = 1, p.H = q.shape[1], p.D = q.shape[2], p.Skv = k.shape[1], p.Hkv = k.shape[2];
    p.tail = qp.shape[2];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0, "k: its " + str(p.Hkv) + " heads must divide the " + str(p.H) +
                                                " heads of q");
    expect_dims(qp, "q_pe", {p.B, p.H, p.tail}, dims_text({{"B", p.B}, {"H", p.H}, {"P", p.tail}}).c_str());
    expect_dims(k, "k", {p.B, p.Skv, p.Hkv, p.D},
                dims_text({{"B", p.B}, {"Skv", p.Skv}, {"Hkv", p.Hkv}, {"D", p.D}}).c_str());
    expect_dims(kp, "k_pe", {p.B, p.Skv, p.Hkv, p.tail},
                dims_text({{"B", p.B}, {"Skv", p.Skv}, {"Hkv", p.Hkv}, {"P", p.tail}}).c_str());
    const ak_tensor& o = operand(output, "output", 3, {AK_FLOAT16, AK_BFLOAT16}, &q, "q");
    check_same_dtype(o, "output", q, "q");
    expect_dims(o, "output", {p.B, p.H, p.D}, dims_text({{"B", p.B}, {"H", p.H}, {"D", p.D}}).c_str());
    require(std::isfinite(scale), "scale: expected a finite number");
    p.q = q.data, p.kv = k.data, p.output = o.data;
    if (p.tail > 0) p.q_pe = qp.data, p.kv_pe = kp.data;
    p.topk = p.Skv, p.dtype = q.dtype, p.causal = false, p.scale = scale;
    latent_decode(p, q);
  });
}

AK_API ak_status ak_lightning_indexer(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* k_scale,
                                      const ak_tensor* weights, const ak_tensor* ks_, const ak_tensor* ke_,
                                      int32_t flags, const ak_tensor* logits) {
  AK_ENTRY("ak_lightning_indexer", {
    Indexer p;
    require((flags & ~(AK_SPARSE_CHECK_INDICES | AK_SPARSE_CLEAN_LOGITS)) == 0,
            "flags: expected AK_SPARSE_CHECK_INDICES = 2 | AK_SPARSE_CLEAN_LOGITS = 4, got " + str(flags));
    const ak_tensor& q = operand(q_, "q", 3, {AK_BFLOAT16, AK_FLOAT8_E4M3}, nullptr, nullptr);
    const ak_tensor& k = operand(k_, "k", 2, {AK_BFLOAT16, AK_FLOAT8_E4M3}, &q, "q");
    check_same_dtype(k, "k", q, "q");
    p.Sq = q.shape[0], p.H = q.shape[1], p.D = q.shape[2], p.Sk = k.shape[0];
    expect_dims(k, "k", {p.Sk, p.D}, ("[Sk, D=" + str(p.D) + "]").c_str());
    if (k_scale) {
      const ak_tensor& s = operand(k_scale, "k_scale", 1, {AK_FLOAT32}, &q, "q");
      expect_dims(s, "k_scale", {p.Sk}, ("[Sk=" + str(p.Sk) + "]").c_str());
      p.k_scale = static_cast<const float*>(s.data);
    }
    const ak_tensor& w = operand(weights, "weights", 2, {AK_FLOAT32}, &q, "q");
    expect_dims(w, "weights", {p.Sq, p.H}, dims_text({{"Sq", p.Sq}, {"H", p.H}}).c_str());
    const ak_tensor& ks = operand(ks_, "ks", 1, {AK_INT32}, &q, "q");
    const ak_tensor& ke = operand(ke_, "ke", 1, {AK_INT32}, &q, "q");
    expect_dims(ks, "ks", {p.Sq}, ("[Sq=" + str(p.Sq) + "]").c_str());
    expect_dims(ke, "ke", {p.Sq}, ("[Sq=" + str(p.Sq) + "]").c_str());
    const ak_tensor& out = operand(logits, "logits", 2, {AK_FLOAT32}, &q, "q");
    expect_dims(out, "logits", {p.Sq, p.Sk}, dims_text({{"Sq", p.Sq}, {"Sk", p.Sk}}).c_str());
    if (flags & AK_SPARSE_CHECK_INDICES) {
      const std::vector<int32_t> lo = host_ints(ks, "ks"), hi = host_ints(ke, "ke");
      for (int64_t i = 0; i < p.Sq; i++) {
        require(lo[i] >= 0 && lo[i] <= hi[i] && hi[i] <= p.Sk,
                "ks, ke: query " + str(i) + " has the key range [" + str(lo[i]) + ", " + str(hi[i]) +
                    "), expected 0 <= ks <= ke <= Sk=" + str(p.Sk));
      }
    }
    p.q = q.data, p.k = k.data, p.weights = static_cast<const float*>(w.data);
    p.ks = static_cast<const int32_t*>(ks.data), p.ke = static_cast<const int32_t*>(ke.data);
    p.logits = static_cast<float*>(out.data);
    p.dtype = q.dtype, p.clean = (flags & AK_SPARSE_CLEAN_LOGITS) != 0;
    // Each backend chooses before the early return of an empty call, so that a forced kernel that cannot
    // serve is refused on every call.
    if (!on_cpu(q)) {
      AK_CUDA_CALL(ak::sparse::cuda::indexer(p, q.device_index));
      return;
    }
    planning::IndexerShape shape = planning::shape_of(p);
    shape.cpu = true;
    p.mma = planning::pick_indexer(shape, tuning::current()) == "mma";
    if (p.Sq > 0 && p.Sk > 0) ak::sparse::cpu::indexer(p);
  });
}

}  // extern "C"
