// The Python module of et_graph.native's compiled kernels (one extension, built once).
#include <torch/extension.h>

#include <vector>

// Declared here, defined in attention_grad.cpp, gram_entries.cpp and random.cpp (no shared header: torch's
// build cache tracks the listed sources only, so every declaration lives in one of them, and a
// signature that drifts fails at link time).
namespace et_graph_native {

// attention_grad.cpp: ET's closed-form attention gradient and its first-order backward.
std::vector<torch::Tensor> attention_grad_forward(torch::Tensor k, torch::Tensor q,
                                                  torch::Tensor beta, torch::Tensor weight,
                                                  torch::Tensor src, torch::Tensor rowptr);
std::vector<torch::Tensor> attention_grad_backward(
    torch::Tensor k, torch::Tensor q, torch::Tensor beta, torch::Tensor weight,
    torch::Tensor src, torch::Tensor rowptr, torch::Tensor probs, torch::Tensor scores,
    torch::Tensor up_k, torch::Tensor up_q, bool need_weight);

// gram_entries.cpp: the Gram entries the Conv2D adjacency mask reads at each edge.
torch::Tensor gram_entries_forward(torch::Tensor x, torch::Tensor src, torch::Tensor dst,
                                   torch::Tensor batch, torch::Tensor ptr, int64_t radius);
torch::Tensor gram_entries_backward(torch::Tensor x, torch::Tensor src, torch::Tensor dst,
                                    torch::Tensor batch, torch::Tensor ptr, int64_t radius,
                                    torch::Tensor grad);

// random.cpp: Philox4x32-10 normals and dropout scales.
torch::Tensor random_normal(int64_t numel, uint64_t seed, bool float64);
torch::Tensor dropout_scale(int64_t numel, double p, uint64_t seed, bool float64);
torch::Tensor philox_words(int64_t blocks, uint64_t seed);

}  // namespace et_graph_native

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
