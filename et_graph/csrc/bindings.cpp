// The Python module of et_graph.native's compiled kernels (one extension, built once).
#include "et_native.h"

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
}
