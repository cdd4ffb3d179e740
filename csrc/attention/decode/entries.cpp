// The C entry of the split-key decode: every argument checked (the messages name it), the split planned,
// the call dispatched by device. Calls the kernel does not serve are refused as unsupported, naming why.
#include <algorithm>
#include <cmath>
#include <string>

#include "attention/decode/backend.h"
#include "attention/decode/problem.h"
#include "attention/planner.h"
#include "core/common.h"

using namespace ak;
using namespace ak::attention::decode;
namespace planning = ak::attention::planning;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

const ak_tensor& cache(const ak_tensor* t_, const char* name, const ak_tensor& q, bool paged, int64_t B,
                       int64_t D) {
  const ak_tensor& t = check_contiguous(t_, name);
  check_same_dtype(t, name, q, "q");
  check_same_device(t, name, q, "q");
  if (paged) {
    require(t.rank == 3 && t.shape[2] == D, std::string(name) + ": expected paged [rows, Hkv, D=" + str(D) +
                                                "], got " + shape_string(t));
  } else {
    require(t.rank == 4 && t.shape[0] == B && t.shape[3] == D,
            std::string(name) + ": expected [B=" + str(B) + ", Skv, Hkv, D=" + str(D) + "], got " + shape_string(t));
  }
  return t;
}

}  // namespace

extern "C" {

AK_API ak_status ak_attention_decode(const ak_tensor* q_, const ak_tensor* k_, const ak_tensor* v_,
                                     const ak_tensor* lengths, const ak_tensor* block_table, int64_t page_size,
                                     double sm_scale, double softcap, int32_t flags, const ak_tensor* output) {
  AK_ENTRY("ak_attention_decode", {
    Problem p;
    require((flags & ~AK_ATTN_CAUSAL) == 0, "flags: expected 0 or AK_ATTN_CAUSAL = 1, got " + str(flags));
    const ak_tensor& q = check_contiguous(q_, "q");
    check_dtype(q, "q", {AK_FLOAT16, AK_BFLOAT16});
    check_device(q, "q");
    require(q.rank == 4, "q: expected [B, Sq, H, D], got " + shape_string(q));
    p.B = q.shape[0], p.Sq = q.shape[1], p.H = q.shape[2], p.D = q.shape[3];
    const bool paged = block_table != nullptr;
    const ak_tensor& k = cache(k_, "k", q, paged, p.B, p.D);
    const ak_tensor& v = cache(v_, "v", q, paged, p.B, p.D);
    require(std::equal(k.shape, k.shape + k.rank, v.shape), "v: expected the shape of k " + shape_string(k) +
                                                                ", got " + shape_string(v));
    p.Hkv = paged ? k.shape[1] : k.shape[2];
    require(p.Hkv >= 1 && p.H % p.Hkv == 0,
            "k: its " + str(p.Hkv) + " heads must divide the " + str(p.H) + " heads of q");
    const ak_tensor& len = check_contiguous(lengths, "lengths");
    check_dtype(len, "lengths", {AK_INT32});
    check_same_device(len, "lengths", q, "q");
    require(len.rank == 1 && len.shape[0] == p.B, "lengths: expected [B=" + str(p.B) + "], got " + shape_string(len));
    if (paged) {
      const ak_tensor& t = check_contiguous(block_table, "block_table");
      check_dtype(t, "block_table", {AK_INT32});
      check_same_device(t, "block_table", q, "q");
      require(t.rank == 2 && t.shape[0] == p.B,
              "block_table: expected [B=" + str(p.B) + ", max_pages], got " + shape_string(t));
      require(page_size >= 1 && k.shape[0] % page_size == 0,
              "page_size: expected a divisor of the cache's " + str(k.shape[0]) + " rows, got " + str(page_size));
      p.table = static_cast<const int32_t*>(t.data);
      p.page_size = page_size, p.max_pages = t.shape[1], p.cache_rows = k.shape[0];
      p.capacity = p.max_pages * page_size;
    } else {
      p.capacity = k.shape[1];
    }
    const ak_tensor& o = check_contiguous(output, "output");
    check_same_dtype(o, "output", q, "q");
    check_same_device(o, "output", q, "q");
    require(std::equal(o.shape, o.shape + o.rank, q.shape) && o.rank == 4,
            "output: expected the shape of q " + shape_string(q) + ", got " + shape_string(o));
    require(std::isfinite(sm_scale) && std::isfinite(softcap) && softcap >= 0,
            "sm_scale, softcap: expected finite numbers, softcap >= 0");
    if (p.B > 65535) fail(AK_ERR_UNSUPPORTED, "decode kernel: " + str(p.B) + " sequences (its grid takes 65535)");
    std::string why;
    const std::string variant = planning::decode_variant(q.dtype, static_cast<int>(p.D), p.rows(), why);
    if (variant.empty()) fail(AK_ERR_UNSUPPORTED, "decode kernel: " + why);
    // The CPU runs the block the CUDA planner would (a tuning pin included), phase by phase.
    if (q.device_type == AK_CPU) p.block = planning::pick_decode(q.dtype, static_cast<int>(p.D), p.rows(), tuning::current())[0];
    for (const ak_tensor* t : {&q, &k, &v}) {
      if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0) {
        fail(AK_ERR_UNSUPPORTED, "decode kernel: q, k and v must start on 16 bytes (it loads 16 bytes at a time)");
      }
    }
    p.q = q.data, p.k = k.data, p.v = v.data, p.output = o.data;
    p.lengths = static_cast<const int32_t*>(len.data);
    p.dtype = q.dtype, p.scale = static_cast<float>(sm_scale), p.softcap = static_cast<float>(softcap);
    p.causal = (flags & AK_ATTN_CAUSAL) != 0;
    if (p.B == 0 || p.Sq == 0 || p.H == 0) return;
    if (q.device_type == AK_CPU) {
      plan_splits(p, kBlocksWanted);  // CUDA: the planner splits for the device's multiprocessors
      ak::attention::decode::cpu::run(p);
    } else {
      AK_CUDA_CALL(ak::attention::decode::cuda::run(p, q.device_index));
    }
  });
}

}  // extern "C"
