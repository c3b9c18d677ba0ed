// Closed-form attention gradient of ET's energy and its first-order backward, as one loop over
// the destination-sorted edges (CPU). The math is et_graph/fused.py's, edge by edge:
//
//   forward:  s_e = <k_hB, q_hC>,  p = softmax over the edges into C of beta_h w_e s_e,
//             c_e = w_e p_e,  dE/dq_C = -sum_e c_e k_B,  dE/dk_B = -sum_e c_e q_C
//   backward: dL/dc_e = -(<G_k[B], q_C> + <G_q[C], k_B>), the softmax's vector-Jacobian
//             product, and the node sums of fused.py's module docstring.
//
// Mini-batches of small graphs spend most of the sparse-kernel path's time in per-call
// overhead (tens of small kernels per step); here one call does a step's work. Each edge
// touches its source's and destination's [H, Y] rows whole (contiguous), and the per-edge
// values are kept edge-major ([E, H]).
//
// Threads (at::parallel_for, torch's intra-op threads). The scatter into dE/dk (and, in
// backward, into dL/dk) would race across destinations, so with the source-sorted layout
// given (T_ptr, T_perm, Dst) the work splits in two passes: one over blocks of destinations
// (everything but the scatter; backward also keeps ds per edge), one over blocks of sources
// that gathers the scatter's terms. The source-sorted order is the stable sort of the
// destination-sorted edges by source, so each row of dE/dk adds the same terms in the same
// order as the one-pass loop: the results do not depend on the number of threads, bit for bit
// (dL/dbeta too: it is summed per destination, then over the destinations in order).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "et_native.h"

namespace et_graph_native {
namespace {

// exp(x) for x <= 0 in float32 (the softmax's logits minus their maximum), branch-free so that
// the loop below vectorises: Cephes' expf (x = k ln 2 + r, |r| <= ln 2 / 2, a degree-6
// polynomial in r, then 2^k from the exponent bits), within 8.3e-8 relative (about one ulp)
// of exp over [-87, 0]; 0 below -87 (where std::exp gives a denormal or 0 beside the row's
// maximum, whose exp is 1).
ET_ALWAYS_INLINE float exp_nonpositive(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  // Round to nearest by the 1.5 * 2^23 trick (|k| < 2^22): no libm call in the loop.
  const float k = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.0f ? 0.0f : poly * scale;
}

// x[i] = exp(x[i]) for x[i] <= 0: the float32 loop per CPU (AVX-512, AVX2, baseline); float64
// keeps std::exp (the reference tests hold it to 1e-12).
ET_CLONES void exp_nonpositive_in_place(float* x, int64_t n) {
  ET_SIMD
  for (int64_t i = 0; i < n; ++i) x[i] = exp_nonpositive(x[i]);
}
void exp_nonpositive_in_place(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

// H (heads) and Y (the head width) as compile-time constants where they are common ones, so
// that the per-head loops unroll; 0 = read at run time.
template <typename scalar_t, int kH, int kY>
struct Kernel {
  // k_row, q_row: the row strides of K and Q (a row's [H, Y] block itself is contiguous, so
  // the key and query halves of one projection are read in place).
  int64_t N, H_, Y, E, w_rows, k_row, q_row;
  const scalar_t *K, *Q, *beta, *W;
  const int64_t *S, *R;
  // The source-sorted layout, for the two-pass (threaded) loops: each source's offsets among
  // the sorted edges (T_ptr [N + 1]), those edges as indices into the destination-sorted ones
  // (T_perm [E]) and every destination-sorted edge's destination (Dst [E]). Null: one pass.
  const int64_t *T_ptr = nullptr, *T_perm = nullptr, *Dst = nullptr;
  // Destinations (or sources) per block of the threaded loops (native.py's KERNEL_GRAIN).
  static constexpr int64_t kGrain = 256;

  inline bool two_pass() const { return T_perm != nullptr; }

  inline int64_t width() const { return kY ? kY : Y; }
  inline int64_t heads() const { return kH ? kH : H_; }
  // out[h] = <a_h, b_h> for every head of the [H, Y] rows a and b. The heads' sums run side by
  // side (independent chains, each still summed in y order), which hides the add latency that
  // one head's chain of Y dependent adds would expose.
  inline void dots(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b,
                   scalar_t* __restrict__ out) const {
    const int64_t H = heads(), Yw = width();
    for (int64_t h = 0; h < H; ++h) {
      const scalar_t* __restrict__ ah = a + h * Yw;
      const scalar_t* __restrict__ bh = b + h * Yw;
      scalar_t acc = 0;
      ET_SIMD_SUM(acc)
      for (int64_t y = 0; y < Yw; ++y) acc += ah[y] * bh[y];
      out[h] = acc;
    }
  }
  inline scalar_t weight(int64_t e, int64_t h) const {
    return W == nullptr ? scalar_t(1) : W[(w_rows == 1 ? 0 : h) * E + e];
  }
  static inline void axpy(scalar_t alpha, const scalar_t* __restrict__ x,
                          scalar_t* __restrict__ y, int64_t n) {
    ET_SIMD
    for (int64_t i = 0; i < (kY ? kY : n); ++i) y[i] += alpha * x[i];
  }

  // probs, scores: [E, H] (edge-major, destination-sorted edges).
  void forward(scalar_t* GK, scalar_t* GQ, scalar_t* P, scalar_t* SC) const {
    if (!two_pass()) return forward_destinations(0, N, GK, GQ, P, SC);
    at::parallel_for(0, N, kGrain, [&](int64_t c0, int64_t c1) {
      forward_destinations(c0, c1, nullptr, GQ, P, SC);
    });
    at::parallel_for(0, N, kGrain, [&](int64_t b0, int64_t b1) {
      forward_sources(b0, b1, P, GK);
    });
  }

  // Destinations [c0, c1): scores, softmax and dE/dq; with GK also dE/dk's terms, scattered.
  // Three passes over the block: the logits minus their destination's maximum (per head), the
  // exponentials of all the block's edges in one vector loop, then the sums and products.
  void forward_destinations(int64_t c0, int64_t c1, scalar_t* GK, scalar_t* GQ, scalar_t* P,
                            scalar_t* SC) const {
    const int64_t H = heads(), Yw = width(), HY = H * Yw;
    std::vector<scalar_t> top(H), total(H);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = R[c], end = R[c + 1];
      if (begin == end) continue;
      const scalar_t* qc = Q + c * q_row;
      std::fill(top.begin(), top.end(), -std::numeric_limits<scalar_t>::infinity());
      for (int64_t e = begin; e < end; ++e) {
        dots(K + S[e] * k_row, qc, SC + e * H);
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t s = SC[e * H + h];
          const scalar_t logit = beta[h] * weight(e, h) * s;
          P[e * H + h] = logit;
          top[h] = std::max(top[h], logit);
        }
      }
      for (int64_t e = begin; e < end; ++e)
        for (int64_t h = 0; h < H; ++h) P[e * H + h] -= top[h];
    }
    exp_nonpositive_in_place(P + R[c0] * H, (R[c1] - R[c0]) * H);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = R[c], end = R[c + 1];
      // Each destination's row of dE/dq is its own: written here whole (zero without edges),
      // so the output needs no zero fill first.
      scalar_t* gq = GQ + c * HY;
      std::fill(gq, gq + HY, scalar_t(0));
      if (begin == end) continue;
      const scalar_t* qc = Q + c * q_row;
      std::fill(total.begin(), total.end(), scalar_t(0));
      for (int64_t e = begin; e < end; ++e)
        for (int64_t h = 0; h < H; ++h) total[h] += P[e * H + h];
      for (int64_t e = begin; e < end; ++e) {
        const scalar_t* kb = K + S[e] * k_row;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t p = P[e * H + h] / total[h];
          P[e * H + h] = p;
          const scalar_t coef = -p * weight(e, h);
          axpy(coef, kb + h * Yw, gq + h * Yw, Yw);
          if (GK) axpy(coef, qc + h * Yw, GK + S[e] * HY + h * Yw, Yw);
        }
      }
    }
  }

  // The second pass's order: every edge out of the sources [b0, b1), source by source, each
  // source's edges in their destination-sorted order (the stable source sort of the plan), so
  // a source's row adds the terms in the order the one-pass loop scatters them.
  // visit(b, e, c): the edge e from b into its destination c.
  template <typename Visit>
  void for_source_edges(int64_t b0, int64_t b1, Visit&& visit) const {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t i = T_ptr[b]; i < T_ptr[b + 1]; ++i) {
        const int64_t e = T_perm[i];
        visit(b, e, Dst[e]);
      }
  }

  // Sources [b0, b1): dE/dk_B = -sum_{e: src = B} c_e q_C, gathered (GK zero on entry).
  void forward_sources(int64_t b0, int64_t b1, const scalar_t* P, scalar_t* GK) const {
    const int64_t H = heads(), Yw = width(), HY = H * Yw;
    for_source_edges(b0, b1, [&](int64_t b, int64_t e, int64_t c) {
      scalar_t* gk = GK + b * HY;
      const scalar_t* qc = Q + c * q_row;
      for (int64_t h = 0; h < H; ++h)
        axpy(-P[e * H + h] * weight(e, h), qc + h * Yw, gk + h * Yw, Yw);
    });
  }

  // DBC: [N, H] scratch for dL/dbeta per destination; DS: [E, H] scratch for ds per edge (two
  // passes only).
  void backward(const scalar_t* P, const scalar_t* SC, const scalar_t* UK, const scalar_t* UQ,
                scalar_t* DK, scalar_t* DQ, scalar_t* DB, scalar_t* DW, scalar_t* DBC,
                scalar_t* DS) const {
    const int64_t H = heads();
    if (!two_pass()) {
      backward_destinations(0, N, P, SC, UK, UQ, DK, DQ, DBC, DW, nullptr);
    } else {
      at::parallel_for(0, N, kGrain, [&](int64_t c0, int64_t c1) {
        backward_destinations(c0, c1, P, SC, UK, UQ, nullptr, DQ, DBC, DW, DS);
      });
      at::parallel_for(0, N, kGrain, [&](int64_t b0, int64_t b1) {
        backward_sources(b0, b1, P, UQ, DS, DK);
      });
    }
    for (int64_t h = 0; h < H; ++h) DB[h] = scalar_t(0);
    for (int64_t c = 0; c < N; ++c)
      for (int64_t h = 0; h < H; ++h) DB[h] += DBC[c * H + h];
  }

  // Destinations [c0, c1): dL/dq, dL/dbeta per destination, dL/dw; with DK also dL/dk's terms,
  // scattered, else ds per edge into DS for backward_sources.
  void backward_destinations(int64_t c0, int64_t c1, const scalar_t* P, const scalar_t* SC,
                             const scalar_t* UK, const scalar_t* UQ, scalar_t* DK, scalar_t* DQ,
                             scalar_t* DBC, scalar_t* DW, scalar_t* DS) const {
    const int64_t H = heads(), Yw = width(), HY = H * Yw;
    std::vector<scalar_t> d_coef, weighted(H), ds(H), coef(H);
    // An absent upstream gradient reads as zero rows: one branch-free loop serves all cases.
    const std::vector<scalar_t> zero_row(HY, scalar_t(0));
    for (int64_t c = c0; c < c1; ++c) {
      scalar_t* d_beta = DBC + c * H;
      std::fill(d_beta, d_beta + H, scalar_t(0));
      const int64_t begin = R[c], end = R[c + 1];
      scalar_t* __restrict__ dqc = DQ + c * HY;  // written whole here, as dE/dq's rows in forward
      std::fill(dqc, dqc + HY, scalar_t(0));
      if (begin == end) continue;
      const scalar_t* __restrict__ qc = Q + c * q_row;
      const scalar_t* __restrict__ uqc = UQ ? UQ + c * HY : zero_row.data();
      d_coef.resize((end - begin) * H);
      std::fill(weighted.begin(), weighted.end(), scalar_t(0));
      // dL/dc_e = -(<G_k[B], q_C> + <G_q[C], k_B>), and sum_e p_e dL/dp_e per head.
      for (int64_t e = begin; e < end; ++e) {
        const int64_t b = S[e];
        const scalar_t* __restrict__ kb = K + b * k_row;
        const scalar_t* __restrict__ ukb = UK ? UK + b * HY : zero_row.data();
        scalar_t* dc_e = d_coef.data() + (e - begin) * H;
        for (int64_t h = 0; h < H; ++h) {
          scalar_t acc = 0;
          ET_SIMD_SUM(acc)
          for (int64_t y = 0; y < Yw; ++y)
            acc += ukb[h * Yw + y] * qc[h * Yw + y] + uqc[h * Yw + y] * kb[h * Yw + y];
          dc_e[h] = -acc;
          weighted[h] -= P[e * H + h] * weight(e, h) * acc;
        }
      }
      for (int64_t e = begin; e < end; ++e) {
        const int64_t b = S[e];
        const scalar_t* __restrict__ kb = K + b * k_row;
        const scalar_t* __restrict__ ukb = UK ? UK + b * HY : zero_row.data();
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t p = P[e * H + h], s = SC[e * H + h], w = weight(e, h);
          const scalar_t dc = d_coef[(e - begin) * H + h];
          const scalar_t d_logit = p * (w * dc - weighted[h]);
          d_beta[h] += d_logit * s * w;
          if (DW) DW[(w_rows == 1 ? 0 : h) * E + e] += p * dc + d_logit * beta[h] * s;
          ds[h] = d_logit * beta[h] * w;
          coef[h] = p * w;
          if (DS) DS[e * H + h] = ds[h];
        }
        if (!DK) {
          for (int64_t h = 0; h < H; ++h) {
            const scalar_t dsh = ds[h], ch = coef[h];
            ET_SIMD
            for (int64_t y = 0; y < Yw; ++y)
              dqc[h * Yw + y] += dsh * kb[h * Yw + y] - ch * ukb[h * Yw + y];
          }
          continue;
        }
        // Both rows' updates in one pass over the heads: each row read and written once.
        scalar_t* __restrict__ dkb = DK + b * HY;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t dsh = ds[h], ch = coef[h];
          ET_SIMD
          for (int64_t y = 0; y < Yw; ++y) {
            const int64_t i = h * Yw + y;
            dqc[i] += dsh * kb[i] - ch * ukb[i];
            dkb[i] += dsh * qc[i] - ch * uqc[i];
          }
        }
      }
    }
  }

  // Sources [b0, b1): dL/dk_B = sum_{e: src = B} (ds_e q_C - c_e G_q[C]), gathered (DK zero on
  // entry), the terms and their order as backward_destinations scatters them.
  void backward_sources(int64_t b0, int64_t b1, const scalar_t* P, const scalar_t* UQ,
                        const scalar_t* DS, scalar_t* DK) const {
    const int64_t H = heads(), Yw = width(), HY = H * Yw;
    const std::vector<scalar_t> zero_row(HY, scalar_t(0));
    for_source_edges(b0, b1, [&](int64_t b, int64_t e, int64_t c) {
      scalar_t* __restrict__ dkb = DK + b * HY;
      const scalar_t* __restrict__ qc = Q + c * q_row;
      const scalar_t* __restrict__ uqc = UQ ? UQ + c * HY : zero_row.data();
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t dsh = DS[e * H + h], ch = P[e * H + h] * weight(e, h);
        ET_SIMD
        for (int64_t y = 0; y < Yw; ++y)
          dkb[h * Yw + y] += dsh * qc[h * Yw + y] - ch * uqc[h * Yw + y];
      }
    });
  }
};

// The source-sorted layout of the two-pass loops, or three empty tensors (one pass).
struct Layout {
  at::Tensor t_ptr, t_perm, dst;
  bool two_pass() const { return t_perm.numel() > 0; }
};

template <typename scalar_t, typename F>
void with_kernel(const at::Tensor& k, const at::Tensor& q, const at::Tensor& beta,
                 const at::Tensor& weight, const at::Tensor& src,
                 const at::Tensor& rowptr, const Layout& layout, F&& body) {
  const int64_t H = k.size(1), Y = k.size(2);
  auto fill = [&](auto& kern) {
    kern.N = k.size(0);
    kern.H_ = H;
    kern.Y = Y;
    kern.E = src.numel();
    kern.w_rows = weight.numel() ? weight.size(0) : 0;
    kern.k_row = k.stride(0);
    kern.q_row = q.stride(0);
    kern.K = k.data_ptr<scalar_t>();
    kern.Q = q.data_ptr<scalar_t>();
    kern.beta = beta.data_ptr<scalar_t>();
    kern.W = weight.numel() ? weight.data_ptr<scalar_t>() : nullptr;
    kern.S = src.data_ptr<int64_t>();
    kern.R = rowptr.data_ptr<int64_t>();
    if (layout.two_pass()) {
      kern.T_ptr = layout.t_ptr.data_ptr<int64_t>();
      kern.T_perm = layout.t_perm.data_ptr<int64_t>();
      kern.Dst = layout.dst.data_ptr<int64_t>();
    }
    body(kern);
  };
  if (H == 4 && Y == 8) {
    Kernel<scalar_t, 4, 8> kern;
    fill(kern);
  } else if (H == 4 && Y == 16) {
    Kernel<scalar_t, 4, 16> kern;
    fill(kern);
  } else if (H == 1 && Y == 16) {
    Kernel<scalar_t, 1, 16> kern;
    fill(kern);
  } else if (Y == 8) {
    Kernel<scalar_t, 0, 8> kern;
    fill(kern);
  } else if (Y == 16) {
    Kernel<scalar_t, 0, 16> kern;
    fill(kern);
  } else {
    Kernel<scalar_t, 0, 0> kern;
    fill(kern);
  }
}

void check_inputs(const at::Tensor& k, const at::Tensor& q, const at::Tensor& beta,
                  const at::Tensor& weight, const at::Tensor& src,
                  const at::Tensor& rowptr, const Layout& layout) {
  // Every input's device, not k's alone: a GPU tensor among CPU ones had its pointer read as
  // host memory (a device audit)
  for (const auto* t : {&k, &q, &beta, &weight, &src, &rowptr, &layout.t_ptr, &layout.t_perm,
                        &layout.dst})
    TORCH_CHECK(t->device().is_cpu(), "attention_grad: every input on the CPU");
  TORCH_CHECK(k.dim() == 3 && rows_contiguous(k),
              "k: an [N, H, Y] tensor on the CPU whose rows are contiguous");
  TORCH_CHECK(q.sizes() == k.sizes() && rows_contiguous(q) && q.scalar_type() == k.scalar_type(),
              "q: like k");
  TORCH_CHECK(beta.numel() == k.size(1) && beta.is_contiguous() &&
                  beta.scalar_type() == k.scalar_type(), "beta: [H], k's dtype");
  TORCH_CHECK(src.scalar_type() == at::kLong && src.is_contiguous() && src.dim() == 1,
              "src: int64 [E]");
  TORCH_CHECK(rowptr.scalar_type() == at::kLong && rowptr.is_contiguous() &&
                  rowptr.numel() == k.size(0) + 1, "rowptr: int64 [N + 1]");
  if (weight.numel()) {
    TORCH_CHECK(weight.dim() == 2 && weight.size(1) == src.numel() && weight.is_contiguous() &&
                    (weight.size(0) == 1 || weight.size(0) == k.size(1)) &&
                    weight.scalar_type() == k.scalar_type(), "weight: [1 or H, E]");
  }
  if (layout.two_pass() || layout.t_ptr.numel() || layout.dst.numel()) {
    for (const auto* t : {&layout.t_ptr, &layout.t_perm, &layout.dst})
      TORCH_CHECK(t->scalar_type() == at::kLong && t->is_contiguous() && t->dim() == 1,
                  "t_ptr, t_perm, dst: contiguous int64 vectors, or all three empty");
    TORCH_CHECK(layout.t_ptr.numel() == k.size(0) + 1 && layout.t_perm.numel() == src.numel() &&
                    layout.dst.numel() == src.numel(),
                "t_ptr: [N + 1]; t_perm, dst: [E] (or all three empty)");
  }
}

}  // namespace

// Each row's [H, Y] block contiguous (the row stride free): k and q as views of one [N, 2HY]
// projection qualify.
bool rows_contiguous(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 3, "rows_contiguous: an [N, H, Y] tensor, got ", t.dim(), " dimensions");
  // A stride along a dimension of size <= 1 is never used (PyTorch leaves it arbitrary).
  return (t.size(2) <= 1 || t.stride(2) == 1) && (t.size(1) <= 1 || t.stride(1) == t.size(2)) &&
         (t.size(0) <= 1 || t.stride(0) >= t.size(1) * t.size(2));
}

at::Tensor exp_nonpositive(at::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && (x.scalar_type() == at::kFloat ||
                                      x.scalar_type() == at::kDouble),
              "exp_nonpositive: a float32 or float64 CPU tensor");
  auto out = x.contiguous().clone();
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "exp_nonpositive", [&] {
    exp_nonpositive_in_place(out.data_ptr<scalar_t>(), out.numel());
  });
  return out;
}

std::vector<at::Tensor> attention_grad_forward(at::Tensor k, at::Tensor q,
                                                  at::Tensor beta, at::Tensor weight,
                                                  at::Tensor src, at::Tensor rowptr,
                                                  at::Tensor t_ptr, at::Tensor t_perm,
                                                  at::Tensor dst) {
  const Layout layout{t_ptr, t_perm, dst};
  check_inputs(k, q, beta, weight, src, rowptr, layout);
  auto grad_k = at::zeros(k.sizes(), k.options());
  auto grad_q = at::empty(q.sizes(), q.options());  // every row written by the kernel
  auto probs = at::empty({src.numel(), k.size(1)}, k.options());
  auto scores = at::empty({src.numel(), k.size(1)}, k.options());
  AT_DISPATCH_FLOATING_TYPES(k.scalar_type(), "attention_grad_forward", [&] {
    with_kernel<scalar_t>(k, q, beta, weight, src, rowptr, layout, [&](const auto& kern) {
      kern.forward(grad_k.data_ptr<scalar_t>(), grad_q.data_ptr<scalar_t>(),
                   probs.data_ptr<scalar_t>(), scores.data_ptr<scalar_t>());
    });
  });
  return {grad_k, grad_q, probs, scores};
}

std::vector<at::Tensor> attention_grad_backward(
    at::Tensor k, at::Tensor q, at::Tensor beta, at::Tensor weight,
    at::Tensor src, at::Tensor rowptr, at::Tensor t_ptr, at::Tensor t_perm,
    at::Tensor dst, at::Tensor probs, at::Tensor scores, at::Tensor up_k,
    at::Tensor up_q, bool need_weight) {
  const Layout layout{t_ptr, t_perm, dst};
  check_inputs(k, q, beta, weight, src, rowptr, layout);
  for (const auto* t : {&probs, &scores, &up_k, &up_q})
    TORCH_CHECK(t->device().is_cpu(), "attention_grad: every input on the CPU");
  TORCH_CHECK(probs.sizes() == scores.sizes() && probs.size(0) == src.numel() &&
                  probs.size(1) == k.size(1) && probs.is_contiguous() && scores.is_contiguous(),
              "probs, scores: [E, H] from forward");
  TORCH_CHECK(!up_k.numel() || (up_k.sizes() == k.sizes() && up_k.is_contiguous()),
              "up_k: like k, or empty");
  TORCH_CHECK(!up_q.numel() || (up_q.sizes() == q.sizes() && up_q.is_contiguous()),
              "up_q: like q, or empty");
  auto d_k = at::zeros(k.sizes(), k.options());
  auto d_q = at::empty(q.sizes(), q.options());  // every row written by the kernel
  auto d_beta = at::zeros_like(beta);
  auto d_w = need_weight && weight.numel() ? at::zeros_like(weight)
                                           : at::empty({0}, k.options());
  auto d_beta_per_node = at::empty({k.size(0), k.size(1)}, k.options());
  auto ds = at::empty({layout.two_pass() ? src.numel() : 0, k.size(1)}, k.options());
  AT_DISPATCH_FLOATING_TYPES(k.scalar_type(), "attention_grad_backward", [&] {
    with_kernel<scalar_t>(k, q, beta, weight, src, rowptr, layout, [&](const auto& kern) {
      kern.backward(probs.data_ptr<scalar_t>(), scores.data_ptr<scalar_t>(),
                    up_k.numel() ? up_k.data_ptr<scalar_t>() : nullptr,
                    up_q.numel() ? up_q.data_ptr<scalar_t>() : nullptr,
                    d_k.data_ptr<scalar_t>(), d_q.data_ptr<scalar_t>(),
                    d_beta.data_ptr<scalar_t>(), d_w.numel() ? d_w.data_ptr<scalar_t>() : nullptr,
                    d_beta_per_node.data_ptr<scalar_t>(),
                    ds.numel() ? ds.data_ptr<scalar_t>() : nullptr);
    });
  });
  return {d_k, d_q, d_beta, d_w};
}

}  // namespace et_graph_native
