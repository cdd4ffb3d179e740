// The CPU backend of the tensor math: floats computed in double (one rounding per result), integers in
// int64; the work split across threads by runs of elements, outputs or rows.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/common.h"
#include "math/backend.h"
#include "math/element.h"
#include "math/plans.h"

namespace ak::math::cpu {
namespace {

// Elements per unit of parallel work.
constexpr int64_t kGrain = int64_t{1} << 15;

// Runs body(begin, end) over [0, n) in parallel, `per_item` elements of work for each item.
template <class F>
void in_parallel(int64_t n, int64_t per_item, F&& body) {
  const int64_t block = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item));
  const int64_t count = (n + block - 1) / block;
  if (count <= 1) {
    body(int64_t{0}, n);
    return;
  }
  parallel_for(count, [&](int64_t i) { body(i * block, std::min(n, (i + 1) * block)); });
}


template <class S, class D>
void map_typed(const ak_tensor& dst, const ak_tensor& a, const ak_tensor* b, double scalar, int op) {
  using C = HostCompute<S>;
  const ak_tensor* views[3] = {&dst, &a, b != nullptr ? b : &a};
  const Walk<3> w = make_walk(views);
  const S* pa = data_of<S>(a);
  const S* pb = b != nullptr ? data_of<S>(*b) : nullptr;
  D* pd = out_of<D>(dst);
  const C s = static_cast<C>(scalar);
  in_parallel(w.numel, 1, [&](int64_t begin, int64_t end) {
    w.for_range(begin, end, [&](const int64_t(&o)[3]) {
      const C x = Elem<S>::load(pa[o[1]]);
      const C y = pb != nullptr ? static_cast<C>(Elem<S>::load(pb[o[2]])) : s;
      pd[o[0]] = map_value<S, D>(op, x, y);
    });
  });
}

template <class S, class D>
void reduce_typed(const ak_tensor& dst, const ak_tensor& src, int reduced_dims, int op) {
  using A = HostCompute<S>;
  const ReducePlan p = make_reduce_plan(dst, src, reduced_dims);
  const S* ps = data_of<S>(src);
  D* pd = out_of<D>(dst);
  in_parallel(p.outer.numel, p.inner.numel, [&](int64_t begin, int64_t end) {
    p.outer.for_range(begin, end, [&](const int64_t(&o)[2]) {
      A acc = reduce_identity<A>(op);
      p.inner.for_range(0, p.inner.numel, [&](const int64_t(&i)[1]) {
        acc = reduce_step(op, acc, static_cast<A>(Elem<S>::load(ps[o[1] + i[0]])));
      });
      pd[o[0]] = Elem<D>::store(reduce_finish(op, acc, p.inner.numel));
    });
  });
}

// One output row at a time: acc[n] += a[i, k] * b[k, n] over k, so b is read along its rows.
template <class S>
void matmul_typed(const ak_tensor& dst, const ak_tensor& a, const ak_tensor& b) {
  using A = HostCompute<S>;
  const MatmulPlan p = make_matmul_plan(dst, a, b);
  const S* pa = data_of<S>(a);
  const S* pb = data_of<S>(b);
  S* pd = out_of<S>(dst);
  const int64_t rows = p.batches.numel * p.m;
  in_parallel(rows, p.n * p.k, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(p.n));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t z = row / p.m, i = row % p.m;
      int64_t o[3];
      p.batches.offsets(z, o);
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t k = 0; k < p.k; ++k) {
        const A x = Elem<S>::load(pa[o[1] + i * p.a_row + k * p.a_col]);
        const S* brow = pb + o[2] + k * p.b_row;
        for (int64_t j = 0; j < p.n; ++j) acc[j] = mul_add(acc[j], x, static_cast<A>(Elem<S>::load(brow[j * p.b_col])));
      }
      S* out = pd + o[0] + i * p.n;
      for (int64_t j = 0; j < p.n; ++j) out[j] = Elem<S>::store(acc[j]);
    }
  });
}

template <class T, class I>
void index_select_typed(const ak_tensor& dst, const ak_tensor& src, int dim, const ak_tensor& index) {
  const IndexPlan p = make_index_plan(dst, src, dim, index);
  const I* idx = data_of<I>(index);
  for (int64_t j = 0; j < p.selected; ++j) {
    require(idx[j] >= 0 && idx[j] < p.dim_size, "index: entry " + std::to_string(j) + " is " +
                                                    std::to_string(idx[j]) + ", outside [0, " +
                                                    std::to_string(p.dim_size) + ")");
  }
  const T* ps = data_of<T>(src);
  T* pd = out_of<T>(dst);
  const int64_t rows = p.outer.numel * p.selected;
  in_parallel(rows, p.inner.numel, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t o[1];
      p.outer.offsets(row / p.selected, o);
      const int64_t s_base = o[0] + static_cast<int64_t>(idx[row % p.selected]) * p.dim_stride;
      const int64_t d_base = row * p.inner.numel;
      p.inner.for_range(0, p.inner.numel, [&](const int64_t(&e)[2]) { pd[d_base + e[0]] = ps[s_base + e[1]]; });
    }
  });
}

}  // namespace

void map(const ak_tensor& dst, const ak_tensor& a, const ak_tensor* b, double scalar, int op) {
  with_storage(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    if (is_predicate(op)) {
      map_typed<S, uint8_t>(dst, a, b, scalar, op);
    } else {
      map_typed<S, S>(dst, a, b, scalar, op);
    }
  });
}

void where(const ak_tensor& dst, const ak_tensor& cond, const ak_tensor& a, const ak_tensor& b) {
  with_bits(dtype_size(dst.dtype), [&](auto tag) {
    using T = decltype(tag);
    const ak_tensor* views[4] = {&dst, &cond, &a, &b};
    const Walk<4> w = make_walk(views);
    const uint8_t* pc = data_of<uint8_t>(cond);
    const T* pa = data_of<T>(a);
    const T* pb = data_of<T>(b);
    T* pd = out_of<T>(dst);
    in_parallel(w.numel, 1, [&](int64_t begin, int64_t end) {
      w.for_range(begin, end, [&](const int64_t(&o)[4]) { pd[o[0]] = pc[o[1]] ? pa[o[2]] : pb[o[3]]; });
    });
  });
}

void reduce(const ak_tensor& dst, const ak_tensor& src, int reduced_dims, int op) {
  with_storage(src.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!Elem<S>::kFloat) {
      if (dst.dtype != src.dtype) return reduce_typed<S, int64_t>(dst, src, reduced_dims, op);  // a sum
    }
    reduce_typed<S, S>(dst, src, reduced_dims, op);
  });
}

void matmul(const ak_tensor& dst, const ak_tensor& a, const ak_tensor& b) {
  with_storage(dst.dtype, [&](auto tag) { matmul_typed<decltype(tag)>(dst, a, b); });
}

void index_select(const ak_tensor& dst, const ak_tensor& src, int dim, const ak_tensor& index) {
  with_bits(dtype_size(src.dtype), [&](auto tag) {
    if (index.dtype == AK_INT32) {
      index_select_typed<decltype(tag), int32_t>(dst, src, dim, index);
    } else {
      index_select_typed<decltype(tag), int64_t>(dst, src, dim, index);
    }
  });
}

void scatter_rows(const ak_tensor& dst, const ak_tensor& src, const ak_tensor& index) {
  const int64_t rows = dst.shape[0], count = src.shape[0];
  const int64_t bytes = count == 0 ? 0 : numel(src) / count * static_cast<int64_t>(dtype_size(src.dtype));
  const auto* at = static_cast<const int32_t*>(index.data);
  for (int64_t m = 0; m < count; m++) {
    require(at[m] >= 0 && at[m] < rows, "index: entry " + std::to_string(m) + " is " + std::to_string(at[m]) +
                                            ", outside dst's " + std::to_string(rows) + " rows");
  }
  for (int64_t m = 0; m < count; m++) {
    std::memcpy(static_cast<unsigned char*>(dst.data) + at[m] * bytes,
                static_cast<const unsigned char*>(src.data) + m * bytes, static_cast<size_t>(bytes));
  }
}

}  // namespace ak::math::cpu
