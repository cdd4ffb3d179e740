// Tensor maps (TMA descriptors) of the Hopper attention kernels (encoded by ../cuda/tensor_map.cu).
#include <algorithm>

#include "cuda/tensor_map.h"
#include "attention/fwd/sm90.cuh"

namespace ak::attention::cuda::sm90 {

void encode_attention_maps(const FwdParams& p, int block_m, int block_n, int dtype, Sm90Maps& maps) {
  const bool varlen = p.cu_q != nullptr;
  // Varlen tensors are packed [T, H, D]: one "batch" whose rows are all tokens. An extent of 0 (no
  // keys at all) still needs a valid map; no tile then reads it.
  const int64_t batch = varlen ? 1 : p.n_seq;
  const int64_t q_rows = std::max<int64_t>(1, varlen ? p.total_q : p.sq);
  const int64_t kv_rows = std::max<int64_t>(1, varlen ? p.total_kv : p.skv);
  using ak::cuda::encode_rows_map;
  encode_rows_map(maps.q, dtype, p.q, p.d, q_rows, p.hq, batch, p.q_row, p.q_head, p.q_batch, block_m, "attention q");
  encode_rows_map(maps.k, dtype, p.k, p.d, kv_rows, p.hkv, batch, p.k_row, p.k_head, p.k_batch, block_n,
                  "attention k");
  if (dtype == AK_FLOAT8_E4M3) {
    // V transposed ([batch, hkv, d, vt_keys]): boxes of 128 keys by all d rows.
    const int64_t keys = p.vt_keys;
    encode_rows_map(maps.v, dtype, p.v, keys, p.d, p.hkv, batch, keys, p.d * keys, p.hkv * p.d * keys, p.d,
                    "attention v (transposed)");
  } else {
    encode_rows_map(maps.v, dtype, p.v, p.d, kv_rows, p.hkv, batch, p.v_row, p.v_head, p.v_batch, block_n,
                    "attention v");
  }
}

}  // namespace ak::attention::cuda::sm90
