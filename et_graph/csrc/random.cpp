// Random numbers for training noise and dropout (CPU), for et_graph/native.py.
//
// PyTorch's CPU generator draws one value at a time from a Mersenne twister: about 3.4 ns per
// normal and 5.5 ns per Bernoulli draw on the machines this was written on, which on an NCI1
// batch (about 2,100 tokens of width 32) is a twentieth of an ET training step. Here each value
// comes from Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011; the generator of cuRAND and of PyTorch's CUDA tensors): a counter-based generator,
// so that block i of four 32-bit words is a pure function of (i, key) and the loop over blocks
// vectorises. The key is a 64-bit seed that the caller draws from PyTorch's generator, so that
// torch.manual_seed still reproduces a run.
//
// Normals use the inverse CDF, z = sqrt(2) erfinv(2u - 1), with M. Giles' single-precision
// erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011) and a polynomial log:
// no branch in the loop, and no libm call but a square root (one instruction with
// -fno-math-errno). u = (m + 1/2) / 2^24 for the top 24 bits m of a
// word, so |z| <= 5.42 (a tail of probability 6e-8 is never drawn).
//
// Threads (at::parallel_for) take blocks of counters: the values do not depend on their number.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "et_native.h"

namespace et_graph_native {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // Philox multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

struct Words {
  uint32_t w0, w1, w2, w3;
};

// The four words of block (counter, 0, 0, 0) under key (k0, k1): ten Philox rounds. Returned by
// value (no array), so that the compiler keeps them in vector registers.
ET_ALWAYS_INLINE Words philox_block(uint64_t counter, uint32_t k0, uint32_t k1) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// log(x) for a normal float x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, as its odd series to s^9 (next term
// under 3e-9 relative).
ET_ALWAYS_INLINE float log_positive(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFFu) - 127;
  uint32_t mantissa_bits = (bits & 0x007FFFFFu) | 0x3F800000u;  // m in [1, 2)
  float m;
  std::memcpy(&m, &mantissa_bits, sizeof m);
  const bool high = m > 1.41421356f;
  m = high ? 0.5f * m : m;
  exponent += high ? 1 : 0;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  const float series =
      1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  return 0.693147181f * static_cast<float>(exponent) + 2.0f * s * series;
}

// sqrt(2) erfinv(2u - 1) for u = (m + 1/2) / 2^24, m = word >> 8: a standard normal.
ET_ALWAYS_INLINE float normal_from_word(uint32_t word) {
  // 2u - 1 = v / 2^24 with v = 2m + 1 - 2^24, an odd integer of magnitude < 2^24: exact.
  const int32_t v = static_cast<int32_t>((word >> 8) << 1) + 1 - (1 << 24);
  const float x = static_cast<float>(v) * (1.0f / 16777216.0f);
  float w = -log_positive((1.0f - x) * (1.0f + x));
  // Giles' two branches, both evaluated so that the loop stays branch-free.
  const float a = w - 2.5f;
  float p = 2.81022636e-08f;
  p = 3.43273939e-07f + p * a;
  p = -3.5233877e-06f + p * a;
  p = -4.39150654e-06f + p * a;
  p = 0.00021858087f + p * a;
  p = -0.00125372503f + p * a;
  p = -0.00417768164f + p * a;
  p = 0.246640727f + p * a;
  p = 1.50140941f + p * a;
  const float b = std::sqrt(w) - 3.0f;
  float q = -0.000200214257f;
  q = 0.000100950558f + q * b;
  q = 0.00134934322f + q * b;
  q = -0.00367342844f + q * b;
  q = 0.00573950773f + q * b;
  q = -0.0076224613f + q * b;
  q = 0.00943887047f + q * b;
  q = 1.00167406f + q * b;
  q = 2.83297682f + q * b;
  return 1.41421356f * (w < 5.0f ? p : q) * x;
}

// Fills block i's four values at i, i + B, i + 2B, i + 3B (B = blocks), for the blocks i in
// [i0, i1): contiguous stores per vector lane. value(word) maps one 32-bit word to one output.
template <typename scalar_t, typename F>
ET_ALWAYS_INLINE void fill_blocks(scalar_t* out, int64_t blocks, int64_t i0, int64_t i1,
                                  uint64_t seed, F value) {
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  ET_SIMD
  for (int64_t i = i0; i < i1; ++i) {
    const Words words = philox_block(static_cast<uint64_t>(i), k0, k1);
    out[i] = value(words.w0);
    out[i + blocks] = value(words.w1);
    out[i + 2 * blocks] = value(words.w2);
    out[i + 3 * blocks] = value(words.w3);
  }
}

// The value of one word, as functors whose call is forced inline (a lambda's is not).
template <typename scalar_t>
struct NormalValue {
  ET_ALWAYS_INLINE scalar_t operator()(uint32_t word) const {
    return static_cast<scalar_t>(normal_from_word(word));
  }
};
template <typename scalar_t>
struct KeepValue {
  uint32_t threshold;  // kept when the word's top 24 bits fall below it
  scalar_t keep;       // 1 / (1 - p)
  ET_ALWAYS_INLINE scalar_t operator()(uint32_t word) const {
    return (word >> 8) < threshold ? keep : scalar_t(0);
  }
};

// One plain function per output (target_clones takes no templates). The normals' FMA
// contraction differs between the clones, so their last bits may differ between CPUs.
ET_CLONES void fill_normal(float* out, int64_t blocks, int64_t i0, int64_t i1, uint64_t seed) {
  fill_blocks(out, blocks, i0, i1, seed, NormalValue<float>{});
}
ET_CLONES void fill_normal(double* out, int64_t blocks, int64_t i0, int64_t i1, uint64_t seed) {
  fill_blocks(out, blocks, i0, i1, seed, NormalValue<double>{});
}
ET_CLONES void fill_dropout(float* out, int64_t blocks, int64_t i0, int64_t i1, uint64_t seed,
                            uint32_t threshold, float keep) {
  fill_blocks(out, blocks, i0, i1, seed, KeepValue<float>{threshold, keep});
}
ET_CLONES void fill_dropout(double* out, int64_t blocks, int64_t i0, int64_t i1, uint64_t seed,
                            uint32_t threshold, double keep) {
  fill_blocks(out, blocks, i0, i1, seed, KeepValue<double>{threshold, keep});
}

// Blocks per thread at least: a block costs a few nanoseconds, a thread's start a few
// microseconds.
constexpr int64_t kBlockGrain = 16384;

at::Tensor filled(int64_t numel, bool float64, const char* name) {
  TORCH_CHECK(numel >= 0, name, ": numel must be >= 0");
  // Whole blocks are drawn; the caller gets the first numel values (a contiguous prefix).
  return at::empty({(numel + 3) / 4 * 4},
                      at::TensorOptions().dtype(float64 ? at::kDouble : at::kFloat));
}

}  // namespace

at::Tensor random_normal(int64_t numel, uint64_t seed, bool float64) {
  auto out = filled(numel, float64, "random_normal");
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "random_normal", [&] {
    scalar_t* data = out.data_ptr<scalar_t>();
    const int64_t blocks = out.numel() / 4;
    at::parallel_for(0, blocks, kBlockGrain, [&](int64_t i0, int64_t i1) {
      fill_normal(data, blocks, i0, i1, seed);
    });
  });
  return out.narrow(0, 0, numel);
}

at::Tensor dropout_scale(int64_t numel, double p, uint64_t seed, bool float64) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout_scale: p must lie in [0, 1)");
  auto out = filled(numel, float64, "dropout_scale");
  // A value is kept with probability round((1 - p) 2^24) / 2^24.
  const uint32_t threshold = static_cast<uint32_t>((1.0 - p) * 16777216.0 + 0.5);
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "dropout_scale", [&] {
    scalar_t* data = out.data_ptr<scalar_t>();
    const int64_t blocks = out.numel() / 4;
    const scalar_t keep = static_cast<scalar_t>(1.0 / (1.0 - p));
    at::parallel_for(0, blocks, kBlockGrain, [&](int64_t i0, int64_t i1) {
      fill_dropout(data, blocks, i0, i1, seed, threshold, keep);
    });
  });
  return out.narrow(0, 0, numel);
}

at::Tensor philox_words(int64_t blocks, uint64_t seed) {
  // The raw generator, block after block (four words each), for the tests' reference.
  TORCH_CHECK(blocks >= 0, "philox_words: blocks must be >= 0");
  auto out = at::empty({blocks, 4}, at::TensorOptions().dtype(at::kLong));
  auto* data = out.data_ptr<int64_t>();
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t i = 0; i < blocks; ++i) {
    const Words words = philox_block(static_cast<uint64_t>(i), k0, k1);
    data[4 * i] = words.w0;
    data[4 * i + 1] = words.w1;
    data[4 * i + 2] = words.w2;
    data[4 * i + 3] = words.w3;
  }
  return out;
}

}  // namespace et_graph_native
