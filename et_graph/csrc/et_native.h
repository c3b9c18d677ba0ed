// Shared by et_graph.native's compiled kernels: the loop macros and every function the Python
// module binds. et_graph/native.py hashes this header with the sources into the build's name,
// so a change here makes a new build (torch's cache alone would track the sources only).
#pragma once

// ATen alone: <torch/extension.h> (the C++ frontend and pybind11) took three times as
// long to compile in each source; bindings.cpp alone includes it.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

// MSVC spells GCC's and Clang's __restrict__ as __restrict.
#if defined(_MSC_VER) && !defined(__restrict__)
#define __restrict__ __restrict
#endif

#define ET_PRAGMA(x) _Pragma(#x)
// Loops vectorised with `omp simd`.
#define ET_SIMD ET_PRAGMA(omp simd)
#define ET_SIMD_SUM(v) ET_PRAGMA(omp simd reduction(+ : v))

// The extension is built without -march (a build cached in a shared home directory must run on
// every machine). Where a loop gains much from wider vectors, GCC's target_clones compiles it
// for AVX-512 and AVX2 as well and picks one at load time (an ifunc); elsewhere it is built
// once, for the baseline.
// (GCC 11 named the x86-64-v3/v4 levels. -DET_NO_CLONES builds the baseline only: the tests
// compare that build with this one.)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && \
    defined(__linux__) && !defined(ET_NO_CLONES)
#define ET_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ET_CLONES
#endif
// What a clone's loop calls must be inlined into it (a call would run it scalar).
#if defined(__GNUC__)
#define ET_ALWAYS_INLINE inline __attribute__((always_inline))
#define ET_LAMBDA_INLINE __attribute__((always_inline))
#else
#define ET_ALWAYS_INLINE inline
#define ET_LAMBDA_INLINE
#endif

namespace et_graph_native {

// attention_grad.cpp: ET's closed-form attention gradient and its first-order backward.
// t_ptr, t_perm, dst: the source-sorted layout for the threaded two-pass loops, or empty.
std::vector<at::Tensor> attention_grad_forward(at::Tensor k, at::Tensor q,
                                                  at::Tensor beta, at::Tensor weight,
                                                  at::Tensor src, at::Tensor rowptr,
                                                  at::Tensor t_ptr, at::Tensor t_perm,
                                                  at::Tensor dst);
std::vector<at::Tensor> attention_grad_backward(
    at::Tensor k, at::Tensor q, at::Tensor beta, at::Tensor weight,
    at::Tensor src, at::Tensor rowptr, at::Tensor t_ptr, at::Tensor t_perm,
    at::Tensor dst, at::Tensor probs, at::Tensor scores, at::Tensor up_k,
    at::Tensor up_q, bool need_weight);

// Whether the kernel reads t [N, H, Y] in place: each row's [H, Y] block contiguous, the row
// stride free (native.rows_contiguous copies the tensor when not).
bool rows_contiguous(const at::Tensor& t);

// exp(x) for x <= 0 as the softmax computes it (float32: a vectorised polynomial; tests).
at::Tensor exp_nonpositive(at::Tensor x);

// gram_entries.cpp: the Gram entries the Conv2D adjacency mask reads at each edge.
at::Tensor gram_entries_forward(at::Tensor x, at::Tensor src, at::Tensor dst,
                                   at::Tensor batch, at::Tensor ptr, int64_t radius);
at::Tensor gram_entries_backward(at::Tensor x, at::Tensor src, at::Tensor dst,
                                    at::Tensor batch, at::Tensor ptr, int64_t radius,
                                    at::Tensor grad);

// random.cpp: Philox4x32-10 normals and dropout factors.
at::Tensor random_normal(int64_t numel, uint64_t seed, bool float64);
at::Tensor dropout_scale(int64_t numel, double p, uint64_t seed, bool float64);
at::Tensor philox_words(int64_t blocks, uint64_t seed);

}  // namespace et_graph_native
