// Host side of the Hopper attention backward: its tensor maps, made by the forward's encoder
// (encode_attention_maps in fwd/sm90_tmap.cu) from a FwdParams view of the call, and the
// launch order of v2.
#include <algorithm>

#include "attention/bwd/sm90_v2.cuh"
#include "attention/fwd/sm90.cuh"

namespace ak::attention::cuda::bwd {

Sm90Maps make_sm90_maps(const BwdParams& p, bool bf16, int box_q, int box_kv) {
  FwdParams f;
  static_cast<CallParams&>(f) = p;
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

V2Launch v2_launch_order(const BwdParams& p, int block_n, int device) {
  V2Launch l;
  l.n_tiles = ak::cuda::ceil_div(p.skv, block_n);
  l.section = 1;
  l.reverse = 0;
  if (l.n_tiles == 0) return l;
  // Which end of the key range meets more query tiles (dense lengths; varlen takes the longest).
  auto visits = [&](int n) {
    const TileRange r = query_tiles(n * block_n, block_n, kBwdTileM, p.sq, p.skv, p.window_left, p.window_right);
    return r.hi - r.lo + 1;
  };
  l.reverse = visits(l.n_tiles - 1) > visits(0) ? 1 : 0;
  // Q and dO of one (KV head, sequence) pair: the group's query heads, all rows.
  const int64_t l2 = std::max<int64_t>(static_cast<int64_t>(ak::cuda::props(device).l2CacheSize), 1 << 20);
  const int64_t pair_bytes = std::max<int64_t>(static_cast<int64_t>(p.group) * p.sq * p.d * 2 * 2, 1);
  const int64_t pairs = static_cast<int64_t>(p.hkv) * p.n_seq;
  l.section = static_cast<int>(std::clamp<int64_t>((l2 / 2) / pair_bytes, 1, std::max<int64_t>(pairs, 1)));
  return l;
}

}  // namespace ak::attention::cuda::bwd
