// The Gram entries that the Conv2D adjacency mask reads at each edge (CPU), for
// et_graph/nn/adjacency_mask.py: for edge B -> C and kernel offsets (a, b) in [-r, r]^2,
//
//   V[e, (a + r) k + (b + r)] = <x_{C+a}, x_{B+b}>,   k = 2r + 1,
//
// and 0 where C + a leaves C's graph or B + b leaves B's graph (the convolution's "SAME" zero
// padding, graph by graph). The tokens of graph g are ptr[g] .. ptr[g + 1] - 1, in order.
// The Python path gathers these from dense per-graph Gram matrices through tens of index
// tensors per batch; here one loop does it, and one more the backward,
//
//   dL/dx_{C+a} += G[e, ab] x_{B+b},   dL/dx_{B+b} += G[e, ab] x_{C+a}.
//
// Threads (at::parallel_for): forward splits the edges anywhere (each writes its own row).
// The backward's scatter stays inside the edge's graph, so it groups the edges by graph (a
// stable counting sort: a CLS graph's edges come in three runs over the graphs) and splits the
// graphs between threads: every token then adds the same terms in the same order whatever the
// number of threads. An edge between two graphs (never in a batch of graphs) makes it run one
// thread.
#include <ATen/Parallel.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "et_native.h"

namespace et_graph_native {
namespace {

struct Bounds {
  int64_t lo, hi;  // the token range of one endpoint's graph
};

template <typename scalar_t>
struct GramKernel {
  const scalar_t* X;
  int64_t D, E, r;
  const int64_t *S, *T, *batch, *ptr;

  ET_ALWAYS_INLINE Bounds bounds(int64_t token) const {
    const int64_t g = batch[token];
    return {ptr[g], ptr[g + 1]};
  }
  static ET_ALWAYS_INLINE scalar_t dot(const scalar_t* __restrict__ a,
                                       const scalar_t* __restrict__ b, int64_t n) {
    scalar_t acc = 0;
    ET_SIMD_SUM(acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
  }
  static ET_ALWAYS_INLINE void axpy(scalar_t alpha, const scalar_t* __restrict__ x,
                                    scalar_t* __restrict__ y, int64_t n) {
    ET_SIMD
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }

  // body(e, i, j, entry) for every kernel entry of the edges at positions [p0, p1) of `order`
  // (null: the edges p0 .. p1 - 1 themselves) whose two tokens lie in their graphs; other
  // entries are left to the caller (forward writes zeros first).
  template <typename F>
  ET_ALWAYS_INLINE void for_each_entry(int64_t p0, int64_t p1, const int64_t* order,
                                       F&& body) const {
    const int64_t k = 2 * r + 1;
    for (int64_t position = p0; position < p1; ++position) {
      const int64_t e = order ? order[position] : position;
      const int64_t c = T[e], b = S[e];
      const Bounds rows = bounds(c), cols = bounds(b);
      for (int64_t da = -r; da <= r; ++da) {
        const int64_t i = c + da;
        if (i < rows.lo || i >= rows.hi) continue;
        for (int64_t db = -r; db <= r; ++db) {
          const int64_t j = b + db;
          if (j < cols.lo || j >= cols.hi) continue;
          body(e, i, j, e * k * k + (da + r) * k + (db + r));
        }
      }
    }
  }

  void forward_edges(int64_t e0, int64_t e1, scalar_t* V) const {
    for_each_entry(e0, e1, nullptr, [&](int64_t, int64_t i, int64_t j, int64_t entry) {
      V[entry] = dot(X + i * D, X + j * D, D);
    });
  }

  void forward(scalar_t* V) const {
    // One thread calls the loop itself: through parallel_for's function object it ran a fifth
    // slower.
    if (at::get_num_threads() == 1) return forward_edges(0, E, V);
    at::parallel_for(0, E, 1024, [&](int64_t e0, int64_t e1) { forward_edges(e0, e1, V); });
  }

  // The edges grouped by graph, each graph's in their order: (offsets [graphs + 1], order
  // [E]); empty when an edge joins two graphs or names a graph out of range.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> edges_by_graph(int64_t graphs) const {
    std::vector<int64_t> offsets(graphs + 1, 0), order(E);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t g = batch[T[e]];
      if (g < 0 || g >= graphs || batch[S[e]] != g) return {};
      ++offsets[g + 1];
    }
    for (int64_t g = 0; g < graphs; ++g) offsets[g + 1] += offsets[g];
    std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
    for (int64_t e = 0; e < E; ++e) order[next[batch[T[e]]]++] = e;
    return {std::move(offsets), std::move(order)};
  }

  ET_ALWAYS_INLINE void backward(int64_t p0, int64_t p1, const int64_t* order,
                                 const scalar_t* G, scalar_t* DX) const {
    for_each_entry(p0, p1, order,
                   [&](int64_t, int64_t i, int64_t j, int64_t entry) ET_LAMBDA_INLINE {
      const scalar_t g = G[entry];
      if (g == scalar_t(0)) return;
      axpy(g, X + j * D, DX + i * D, D);
      axpy(g, X + i * D, DX + j * D, D);
    });
  }
};

template <typename scalar_t>
GramKernel<scalar_t> make_kernel(const at::Tensor& x, const at::Tensor& src,
                                 const at::Tensor& dst, const at::Tensor& batch,
                                 const at::Tensor& ptr, int64_t radius) {
  return {x.data_ptr<scalar_t>(), x.size(1), src.numel(), radius,
          src.data_ptr<int64_t>(), dst.data_ptr<int64_t>(), batch.data_ptr<int64_t>(),
          ptr.data_ptr<int64_t>()};
}

// The backward's scatter gains from wider vectors (AVX2/AVX-512 clones: about a third off);
// the forward's short dot products do not, so it keeps one build.
ET_CLONES void backward_edges(const GramKernel<float>& kernel, int64_t p0, int64_t p1,
                              const int64_t* order, const float* G, float* DX) {
  kernel.backward(p0, p1, order, G, DX);
}
ET_CLONES void backward_edges(const GramKernel<double>& kernel, int64_t p0, int64_t p1,
                              const int64_t* order, const double* G, double* DX) {
  kernel.backward(p0, p1, order, G, DX);
}

template <typename scalar_t>
void run_backward(const GramKernel<scalar_t>& kernel, int64_t graphs, const scalar_t* G,
                  scalar_t* DX) {
  if (at::get_num_threads() > 1 && kernel.E > 0 && graphs > 1) {
    const auto [offsets, order] = kernel.edges_by_graph(graphs);
    if (!order.empty()) {
      at::parallel_for(0, graphs, 8, [&](int64_t g0, int64_t g1) {
        backward_edges(kernel, offsets[g0], offsets[g1], order.data(), G, DX);
      });
      return;
    }
  }
  // One thread, one graph, or an edge between two graphs: the edges in their order.
  backward_edges(kernel, 0, kernel.E, nullptr, G, DX);
}

void check_inputs(const at::Tensor& x, const at::Tensor& src, const at::Tensor& dst,
                  const at::Tensor& batch, const at::Tensor& ptr, int64_t radius) {
  // Every input's device, not x's alone (a device audit)
  for (const auto* t : {&x, &src, &dst, &batch, &ptr})
    TORCH_CHECK(t->device().is_cpu(), "gram_entries: every input on the CPU");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x: a contiguous [T, D] tensor on the CPU");
  for (const auto* t : {&src, &dst, &batch, &ptr})
    TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous() && t->dim() == 1,
                "src, dst, batch, ptr: contiguous int64 vectors");
  TORCH_CHECK(src.numel() == dst.numel(), "src and dst: one entry per edge");
  TORCH_CHECK(batch.numel() == x.size(0), "batch: one graph index per token");
  TORCH_CHECK(ptr.numel() >= 1, "ptr: [graphs + 1] token offsets");
  TORCH_CHECK(radius >= 0, "radius: kernel_size // 2, not negative");
}

}  // namespace

at::Tensor gram_entries_forward(at::Tensor x, at::Tensor src, at::Tensor dst,
                                   at::Tensor batch, at::Tensor ptr, int64_t radius) {
  check_inputs(x, src, dst, batch, ptr, radius);
  const int64_t k = 2 * radius + 1;
  auto values = at::zeros({src.numel(), k * k}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gram_entries_forward", [&] {
    make_kernel<scalar_t>(x, src, dst, batch, ptr, radius).forward(values.data_ptr<scalar_t>());
  });
  return values;
}

at::Tensor gram_entries_backward(at::Tensor x, at::Tensor src, at::Tensor dst,
                                    at::Tensor batch, at::Tensor ptr, int64_t radius,
                                    at::Tensor grad) {
  check_inputs(x, src, dst, batch, ptr, radius);
  TORCH_CHECK(grad.device().is_cpu(), "gram_entries: every input on the CPU");
  const int64_t k = 2 * radius + 1;
  TORCH_CHECK(grad.sizes() == at::IntArrayRef({src.numel(), k * k}) && grad.is_contiguous() &&
                  grad.scalar_type() == x.scalar_type(),
              "grad: a contiguous [E, k * k] tensor of x's dtype");
  auto d_x = at::zeros_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gram_entries_backward", [&] {
    run_backward(make_kernel<scalar_t>(x, src, dst, batch, ptr, radius), ptr.numel() - 1,
                 grad.data_ptr<scalar_t>(), d_x.data_ptr<scalar_t>());
  });
  return d_x;
}

}  // namespace et_graph_native
