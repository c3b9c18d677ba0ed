// The Python module of et_graph.native's compiled kernels (one extension, built once).
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <atomic>

#include "et_native.h"

namespace {
// How many of torch's threads an at::parallel_for of this build runs on: one where it was
// built without an OpenMP runtime. For the tests.
int64_t threads_used() {
  const int64_t n = at::get_num_threads();
  std::atomic<int64_t> highest{0};
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) {
    const int64_t id = at::get_thread_num();
    int64_t seen = highest.load();
    while (id > seen && !highest.compare_exchange_weak(seen, id)) {
    }
  });
  return highest.load() + 1;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace et_graph_native;
  m.def("forward", &attention_grad_forward, "ET's attention gradient (CPU, one loop)");
  m.def("backward", &attention_grad_backward, "its first-order backward");
  m.def("gram_entries_forward", &gram_entries_forward,
        "the Conv2D mask's Gram entries at the edges (CPU, one loop)");
  m.def("gram_entries_backward", &gram_entries_backward, "their backward");
  m.def("random_normal", &random_normal, "numel standard normals from Philox4x32-10");
  m.def("dropout_scale", &dropout_scale, "numel dropout factors: 0 or 1 / (1 - p)");
  m.def("philox_words", &philox_words, "the generator's raw words, [blocks, 4]");
  m.def("rows_contiguous", &rows_contiguous,
        "whether the kernels read an [N, H, Y] tensor in place (each row's block contiguous)");
  m.def("threads_used", &threads_used, "threads an at::parallel_for runs on (tests)");
  m.def("exp_nonpositive", &exp_nonpositive, "exp(x), x <= 0, as the softmax computes it (tests)");
}
