// Host side of the Hopper attention backward: its tensor maps, made by the forward's encoder
// (encode_attention_maps in cuda_fwd_sm90_tmap.cu) from a FwdParams view of the call.
#include "cuda_bwd_sm90.cuh"
#include "cuda_fwd_sm90.cuh"

namespace ak::attention::cuda::bwd {

Sm90Maps make_sm90_maps(const BwdParams& p, bool bf16, int box_q, int box_kv) {
  FwdParams f;
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.q_batch = p.q_batch, f.q_row = p.q_row, f.q_head = p.q_head;
  f.k_batch = p.k_batch, f.k_row = p.k_row, f.k_head = p.k_head;
  f.v_batch = p.v_batch, f.v_row = p.v_row, f.v_head = p.v_head;
  f.n_seq = p.n_seq;
  f.hq = p.hq;
  f.hkv = p.hkv;
  f.group = p.group;
  f.d = p.d;
  f.sq = p.sq;
  f.skv = p.skv;
  f.cu_q = p.cu_q;
  f.cu_kv = p.cu_kv;
  f.total_q = p.cu_q != nullptr ? p.tq : static_cast<int64_t>(p.n_seq) * p.sq;
  f.total_kv = p.cu_q != nullptr ? p.tkv : static_cast<int64_t>(p.n_seq) * p.skv;
  const int dtype = bf16 ? AK_BFLOAT16 : AK_FLOAT16;

  sm90::Sm90Maps qkv;
  sm90::encode_attention_maps(f, box_q, box_kv, dtype, qkv);
  // dO is laid out like q: encode it in q's place.
  f.q = p.dout;
  f.q_batch = p.do_batch, f.q_row = p.do_row, f.q_head = p.do_head;
  sm90::Sm90Maps dout;
  sm90::encode_attention_maps(f, box_q, box_kv, dtype, dout);

  Sm90Maps maps;
  maps.q = qkv.q;
  maps.k = qkv.k;
  maps.v = qkv.v;
  maps.dout = dout.q;
  return maps;
}

}  // namespace ak::attention::cuda::bwd
