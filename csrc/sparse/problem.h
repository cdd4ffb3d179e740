// The sparse-attention calls as both backends see them, after the entries checked every argument:
// plain pointers and sizes of contiguous tensors, passed by value to the CUDA kernels.
#pragma once

#include <cstdint>

namespace ak::sparse {

// The widest list of selected blocks a selection row keeps (NSA uses 16).
constexpr int64_t kMaxSelectedBlocks = 128;

// Packed sequences: token t of sequence n is t - offsets[n] into it; compressed rows of sequence n start at
// chunk_offsets[n] (NSA).
struct Packed {
  const int32_t* offsets = nullptr;        // [N + 1]
  const int32_t* chunk_offsets = nullptr;  // [N + 1], or null when the op has no compressed rows
  int64_t N = 0;                           // sequences
  int64_t T = 0;                           // tokens (offsets[N])
};

// Which attention block the CPU backend runs for an NSA branch (the CUDA backend: the planner's registry row):
// the per-item kernels, or the phases of the tiled block on CUDA cores or on tensor cores.
enum class NsaBlock { item, tiled, mma };

// NSA's compressed branch: each query attends the compressed rows whose blocks lie wholly in its past.
struct NsaCompression {
  Packed seq;
  const void* q = nullptr;      // [T, H, K]
  const void* k_cmp = nullptr;  // [C, Hkv, K]
  const void* v_cmp = nullptr;  // [C, Hkv, V]
  void* output = nullptr;       // [T, H, V], q's dtype
  float* lse = nullptr;         // [T, H]
  int32_t dtype = 0;            // of q, k_cmp, v_cmp and output
  int64_t H = 0, Hkv = 0, K = 0, V = 0, C = 0;
  int64_t block = 0, stride = 0;  // compressed row c covers tokens [c stride, c stride + block)
  double scale = 0;
  NsaBlock kernel = NsaBlock::item;  // CPU: the planner's block (CUDA: its registry row)
};

// NSA's block selection: the selected blocks of each (token, KV head) from the compressed scores.
struct NsaTopk {
  Packed seq;
  const void* q = nullptr;      // [T, H, K]
  const void* k_cmp = nullptr;  // [C, Hkv, K]
  const float* lse = nullptr;   // [T, H]
  int32_t* indices = nullptr;   // [T, Hkv, S]
  int32_t dtype = 0;
  int64_t H = 0, Hkv = 0, K = 0, C = 0, S = 0;
  int64_t block = 0;
  double scale = 0;
  bool mma = false;  // CPU: the tensor-core block's steps (sparse/topk_block.h), else item by item
};

// NSA's selected branch: attention over the keys of the selected blocks.
struct NsaSelection {
  Packed seq;
  const void* q = nullptr;           // [T, H, K]
  const void* k = nullptr;           // [T, Hkv, K]
  const void* v = nullptr;           // [T, Hkv, V]
  const int32_t* indices = nullptr;  // [T, Hkv, S]
  const int32_t* counts = nullptr;   // [T, Hkv], or null (every entry)
  void* output = nullptr;            // [T, H, V]
  float* lse = nullptr;              // [T, H], or null
  int32_t dtype = 0;
  int64_t H = 0, Hkv = 0, K = 0, V = 0, S = 0;
  int64_t block = 0;
  bool causal = true;
  double scale = 0;
  NsaBlock kernel = NsaBlock::item;  // CPU: the planner's block (CUDA: its registry row)
};

// Decode over a latent cache: DeepSeek sparse attention (each query attends the cache rows its top-k list
// names) and, with no list, MLA (every row). A row's key is its D + tail columns, its value the first D. The
// tail (the rotary part) is in the same rows of q and kv, or in tensors of its own (q_pe, kv_pe: MLA's).
struct DsaDecode {
  const void* q = nullptr;           // [B, Sq, H, D + tail], or [B, Sq, H, D] with q_pe
  const void* kv = nullptr;          // [B, Skv, Hkv, D + tail], or [B, Skv, Hkv, D] with kv_pe
  const void* q_pe = nullptr;        // [B, Sq, H, tail], or null
  const void* kv_pe = nullptr;       // [B, Skv, Hkv, tail], or null (null exactly when q_pe is)
  const int32_t* indices = nullptr;  // [B, Sq, Hkv, topk], or null: slot j is row j (topk = Skv)
  void* output = nullptr;            // [B, Sq, H, D]
  int32_t dtype = 0;
  int64_t B = 0, Sq = 0, Skv = 0, H = 0, Hkv = 0, D = 0, tail = 0, topk = 0;
  int64_t q_start = 0, stride_kv = 1;
  bool causal = true;
  double scale = 0;
  bool mma = false;  // CPU: the tensor-core block's phases (sparse/dsa_source.h), else item by item
  // The tensor-core block's split of each list into `splits` runs of `chunk` slots (a multiple of 64): with
  // more than one, each run writes its partial output and log-sum-exp, and a combine merges them.
  int64_t splits = 1, chunk = 0;
  float* partial = nullptr;      // [splits, B Sq, H, D]
  float* partial_lse = nullptr;  // [splits, B Sq, H]
};

// The lightning indexer: logits[i, j] = sum_h w[i, h] relu(scale_j q[i, h] . k[j]) over ks[i] <= j < ke[i].
struct Indexer {
  const void* q = nullptr;         // [Sq, H, D]
  const void* k = nullptr;         // [Sk, D], q's dtype
  const float* k_scale = nullptr;  // [Sk], or null (ones)
  const float* weights = nullptr;  // [Sq, H]
  const int32_t* ks = nullptr;     // [Sq]
  const int32_t* ke = nullptr;     // [Sq]
  float* logits = nullptr;         // [Sq, Sk]
  int32_t dtype = 0;
  int64_t Sq = 0, Sk = 0, H = 0, D = 0;
  bool clean = true;  // outside [ks, ke): -inf, else 0
  bool mma = false;   // CPU: the tensor-core block's phases (sparse/indexer_block.h), else item by item
};

}  // namespace ak::sparse
