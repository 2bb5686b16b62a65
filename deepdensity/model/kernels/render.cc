// The DeepDensity layer's rendering as one CPU kernel: the mixture density
//
//     density[b, v] = sum_k exp(q_bk(x_v)),   q_bk(x) = monomials(x) . coeffs[b, k, :]
//
// at the centres x_v of the regular grid over [-1, 1]^n, and its gradient with respect to
// the coefficients, d/dc[b,k,m] = sum_v upstream[b, v] exp(q_bk(x_v)) monomial_m(x_v).
// (Cunha et al., HPML 2018, eq. 7; the coefficients are `quadratic_coefficients`' in
// deepdensity/model/layers.py, whose monomial order this file follows: x_i^2, x_i x_j for
// i > j, x_i, 1.)
//
// Why a kernel: in TensorFlow ops the rendering writes (B, K, V) float32 tensors (26 MB at
// B = 32, K = 50, V = 4096) several times and reads them again in the backward pass, with
// element-wise kernels built for AVX only. Here every exponential is computed where it is
// summed and never stored; the backward pass computes it again. Each row of the grid (the
// last axis, G points) is one short vector loop, compiled three times (x86-64, AVX2 + FMA,
// AVX-512) and picked at run time from the CPU and the DEEPDENSITY_MAX_CPU_ISA or
// ONEDNN_MAX_CPU_ISA limit.
//
// Exactness: the exponent is evaluated in float64 (its terms reach 1e5 and cancel to a few
// units near a component's mean), the exponential in float32 to about 2 ulp, and a row
// whose exponents are all below -88 (each term below 1e-38) is skipped: those terms are 0
// in float32 anyway. Work is split by whole rows (forward) and whole components
// (backward), each written by one thread in a fixed order, so results do not depend on the
// thread count.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace {

using tensorflow::int64;

constexpr double kSkipBelow = -88.0;  // a row whose exponents are all below this adds 0
constexpr float kZeroBelow = -87.0f;  // exp of anything below is flushed to 0 (< 1.7e-38)

// exp(x) in float32 for x <= 88: 2^k e^r with k = round(x / ln 2) and |r| <= ln(2) / 2,
// e^r by its Taylor polynomial of degree 7 (truncation error below 5.2e-9 relative, under
// float32's 6e-8). ln 2 is split in two so that k * kLn2Hi is exact. Written without
// branches or library calls so that the loops around it vectorise.
inline __attribute__((always_inline)) float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < kZeroBelow ? kZeroBelow : (x > 88.0f ? 88.0f : x);
  const float k = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < kZeroBelow ? 0.0f : p * scale;
}

// The grid and the monomial layout of one rendering. A row is the last axis at fixed
// leading coordinates; monomial j is row_factor[j][r] * u^power[j] at row r and last
// coordinate u, so along a row q(u) = R[r] + u (S[r] + T u).
struct Grid {
  int n = 0;                        // dimensions, 1..3
  int size = 0;                     // G, points per axis
  int m = 0;                        // monomials, (n + 1)(n + 2) / 2
  int64 rows = 0;                   // G^(n - 1)
  std::vector<double> axis;         // cell centres -1 + (i + 0.5) 2 / G
  std::vector<int> power;           // (m): the last coordinate's power in monomial j
  std::vector<double> row_factor;   // (m, rows): monomial j's factor in the leading coordinates
};

Grid make_grid(int64 m, int size) {
  Grid g;
  g.n = m == 3 ? 1 : m == 6 ? 2 : 3;
  g.size = size;
  g.m = static_cast<int>(m);
  g.rows = 1;
  for (int d = 0; d < g.n - 1; ++d) g.rows *= size;
  for (int i = 0; i < size; ++i) g.axis.push_back(-1.0 + (i + 0.5) * (2.0 / size));
  const int last = g.n - 1;
  g.power.assign(g.m, 0);
  g.row_factor.assign(g.m * g.rows, 1.0);
  for (int64 r = 0; r < g.rows; ++r) {
    double x[3] = {1.0, 1.0, 1.0};  // leading coordinates of row r, C order
    for (int64 d = last - 1, rest = r; d >= 0; --d, rest /= size) x[d] = g.axis[rest % size];
    int j = 0;
    auto set = [&](int power, double factor) { g.power[j] = power; g.row_factor[j++ * g.rows + r] = factor; };
    for (int i = 0; i < g.n; ++i) set(i == last ? 2 : 0, i == last ? 1.0 : x[i] * x[i]);       // x_i^2
    for (int i = 1; i < g.n; ++i)
      for (int k = 0; k < i; ++k) set(i == last ? 1 : 0, i == last ? x[k] : x[i] * x[k]);    // x_i x_k
    for (int i = 0; i < g.n; ++i) set(i == last ? 1 : 0, i == last ? 1.0 : x[i]);              // x_i
    set(0, 1.0);                                                                               // 1
  }
  return g;
}

// One component's quadratic along every row: R, S, T, and each row's largest exponent
// (`top`, at the row's ends or at the parabola's vertex), in scratch arrays of `rows`.
struct Rows {
  std::vector<double> R, S, top;
  double T = 0.0;
  explicit Rows(int64 rows) : R(rows), S(rows), top(rows) {}
};

inline __attribute__((always_inline)) void row_quadratics(const Grid& g, const double* c, Rows& q) {
  const int64 rows = g.rows;
  double* __restrict R = q.R.data();
  double* __restrict S = q.S.data();
  double* __restrict top = q.top.data();
  for (int64 r = 0; r < rows; ++r) R[r] = S[r] = 0.0;
  for (int j = 0; j < g.m; ++j) {
    const double cj = c[j];
    const double* __restrict f = g.row_factor.data() + j * rows;
    if (g.power[j] == 2) q.T = cj;
    double* __restrict dst = g.power[j] == 0 ? R : S;
    if (g.power[j] == 2) continue;
#pragma omp simd
    for (int64 r = 0; r < rows; ++r) dst[r] += cj * f[r];
  }
  const double T = q.T, lo = g.axis.front(), hi = g.axis.back();
#pragma omp simd
  for (int64 r = 0; r < rows; ++r) {
    const double at_lo = R[r] + lo * (S[r] + T * lo), at_hi = R[r] + hi * (S[r] + T * hi);
    top[r] = at_lo > at_hi ? at_lo : at_hi;
  }
  if (T < 0) {
#pragma omp simd
    for (int64 r = 0; r < rows; ++r) {
      double u = -S[r] / (2 * T);
      u = u < lo ? lo : (u > hi ? hi : u);
      const double at_u = R[r] + u * (S[r] + T * u);
      top[r] = at_u > top[r] ? at_u : top[r];
    }
  }
}

struct Forward {
  const double* coeffs;  // (B, K, m)
  float* density;        // (B, V)
  int64 K;
  const Grid* grid;
};

struct Backward {
  const double* coeffs;    // (B, K, m)
  const float* upstream;   // (B, V)
  double* grad;            // (B, K, m)
  int64 K;
  const Grid* grid;
};

// Samples [start, limit): each sample's density, summed over its components in order.
template <int kG>
inline __attribute__((always_inline)) void forward_samples(const Forward& f, int64 start, int64 limit) {
  const Grid& g = *f.grid;
  const int G = kG ? kG : g.size;
  const double* __restrict u = g.axis.data();
  Rows q(g.rows);
  alignas(64) float q32[256];
  for (int64 b = start; b < limit; ++b) {
    float* __restrict out = f.density + b * g.rows * G;
    for (int64 v = 0; v < g.rows * G; ++v) out[v] = 0.0f;
    for (int64 k = 0; k < f.K; ++k) {
      row_quadratics(g, f.coeffs + (b * f.K + k) * g.m, q);
      const double T = q.T;
      for (int64 r = 0; r < g.rows; ++r) {
        if (q.top[r] < kSkipBelow) continue;
        const double R = q.R[r], S = q.S[r];
        float* __restrict row = out + r * G;
#pragma omp simd
        for (int i = 0; i < G; ++i) q32[i] = static_cast<float>(R + u[i] * (S + T * u[i]));
#pragma omp simd
        for (int i = 0; i < G; ++i) row[i] += exp_f32(q32[i]);
      }
    }
  }
}

// Components [start, limit) of the flattened (B, K): sum_v upstream exp(q) monomial_j, with
// one float accumulator per monomial and lane, summed in float64 at the end.
template <int kG>
inline __attribute__((always_inline)) void backward_components(const Backward& w, int64 start, int64 limit) {
  const Grid& g = *w.grid;
  const int G = kG ? kG : g.size;
  Rows q(g.rows);
  alignas(64) float u32[256], q32[256], e[3][256], acc[10][256];
  for (int i = 0; i < G; ++i) u32[i] = static_cast<float>(g.axis[i]);
  const double* __restrict u = g.axis.data();
  for (int64 t = start; t < limit; ++t) {
    const int64 b = t / w.K;
    row_quadratics(g, w.coeffs + t * g.m, q);
    const double T = q.T;
    for (int j = 0; j < g.m; ++j)
      for (int i = 0; i < G; ++i) acc[j][i] = 0.0f;
    for (int64 r = 0; r < g.rows; ++r) {
      if (q.top[r] < kSkipBelow) continue;
      const double R = q.R[r], S = q.S[r];
      const float* __restrict up = w.upstream + b * g.rows * G + r * G;
#pragma omp simd
      for (int i = 0; i < G; ++i) q32[i] = static_cast<float>(R + u[i] * (S + T * u[i]));
#pragma omp simd
      for (int i = 0; i < G; ++i) {
        const float x = exp_f32(q32[i]) * up[i];
        e[0][i] = x;
        e[1][i] = x * u32[i];
        e[2][i] = x * u32[i] * u32[i];
      }
      for (int j = 0; j < g.m; ++j) {
        const float f = static_cast<float>(g.row_factor[j * g.rows + r]);
        const float* __restrict src = e[g.power[j]];
        float* __restrict dst = acc[j];
#pragma omp simd
        for (int i = 0; i < G; ++i) dst[i] += f * src[i];
      }
    }
    double* out = w.grad + t * g.m;
    for (int j = 0; j < g.m; ++j) {
      double sum = 0.0;
      for (int i = 0; i < G; ++i) sum += acc[j][i];
      out[j] = sum;
    }
  }
}

// sum_i exp(x_i) over [start, limit): `make bench` times it for the exponential rate the
// rendering can reach on this CPU (its roof).
inline __attribute__((always_inline)) float exp_sum(const float* x, int64 start, int64 limit) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64 i = start; i < limit; ++i) sum += exp_f32(x[i]);
  return sum;
}

// The same loops compiled for three instruction sets.
#define DD_VARIANTS(ATTR, SUFFIX)                                                        \
  ATTR float exp_sum_##SUFFIX(const float* x, int64 s, int64 l) { return exp_sum(x, s, l); } \
  ATTR void forward_##SUFFIX(const Forward& f, int64 s, int64 l) {                      \
    if (f.grid->size == 16) forward_samples<16>(f, s, l); else forward_samples<0>(f, s, l); \
  }                                                                                      \
  ATTR void backward_##SUFFIX(const Backward& w, int64 s, int64 l) {                    \
    if (w.grid->size == 16) backward_components<16>(w, s, l);                            \
    else backward_components<0>(w, s, l);                                                \
  }

DD_VARIANTS(, baseline)
#if defined(__x86_64__)
DD_VARIANTS(__attribute__((target("avx2,fma"))), avx2)
DD_VARIANTS(__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512"))), avx512)
#endif

enum class Isa { kBaseline, kAvx2, kAvx512 };

// The highest variant this CPU runs, lowered by DEEPDENSITY_MAX_CPU_ISA or, when that is
// unset, ONEDNN_MAX_CPU_ISA (the values oneDNN takes: SSE41, AVX, AVX2, AVX512_CORE, ...),
// so that one setting lowers the whole training step.
Isa chosen_isa() {
  Isa isa = Isa::kBaseline;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = Isa::kAvx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
    isa = Isa::kAvx512;
#endif
  const char* limit = std::getenv("DEEPDENSITY_MAX_CPU_ISA");
  if (limit == nullptr || *limit == '\0') limit = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (limit != nullptr && *limit != '\0') {
    std::string v(limit);
    for (auto& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    Isa cap = Isa::kBaseline;
    if (v == "ALL" || v.rfind("AVX512", 0) == 0 || v.rfind("AVX10", 0) == 0) cap = Isa::kAvx512;
    else if (v.rfind("AVX2", 0) == 0) cap = Isa::kAvx2;
    if (cap < isa) isa = cap;
  }
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "x86-64 baseline";
  }
}


using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::errors::InvalidArgument;

// Checks shared by both kernels: coeffs (B, K, m) with m in {3, 6, 10}; false when not.
bool valid_coeffs(OpKernelContext* ctx, const Tensor& coeffs) {
  if (coeffs.dims() != 3) {
    ctx->CtxFailure(InvalidArgument("coeffs must be (B, K, m), got rank ", coeffs.dims()));
    return false;
  }
  const int64 m = coeffs.dim_size(2);
  if (m != 3 && m != 6 && m != 10) {
    ctx->CtxFailure(InvalidArgument("coeffs' last axis must hold 3, 6 or 10 monomials (n = 1, 2, 3), got ", m));
    return false;
  }
  return true;
}

class RenderBase : public OpKernel {
 public:
  explicit RenderBase(OpKernelConstruction* ctx) : OpKernel(ctx), isa_(chosen_isa()) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("grid_size", &grid_size_));
    OP_REQUIRES(ctx, grid_size_ >= 1 && grid_size_ <= 256,
                InvalidArgument("grid_size must be 1..256, got ", grid_size_));
  }
  RenderBase(OpKernelConstruction* ctx, int grid_size) : OpKernel(ctx), grid_size_(grid_size), isa_(chosen_isa()) {}

 protected:
  // Runs fn(start, limit) over `total` units of about `cost` cycles each on TF's CPU threads.
  template <typename Fn>
  void shard(OpKernelContext* ctx, int64 total, int64 cost, Fn fn) {
    auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(workers->num_threads, workers->workers, total, cost, fn);
  }
  int grid_size_;
  Isa isa_;
};

class RenderOp : public RenderBase {
 public:
  using RenderBase::RenderBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& coeffs = ctx->input(0);
    if (!valid_coeffs(ctx, coeffs)) return;
    const Grid grid = make_grid(coeffs.dim_size(2), grid_size_);
    const int64 B = coeffs.dim_size(0), K = coeffs.dim_size(1);
    Tensor* density = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({B, grid.rows * grid.size}), &density));
    const Forward f{coeffs.flat<double>().data(), density->flat<float>().data(), K, &grid};
    const Isa isa = isa_;
    shard(ctx, B, K * grid.rows * grid.size * 10, [&f, isa](int64 s, int64 l) {
#if defined(__x86_64__)
      if (isa == Isa::kAvx512) return forward_avx512(f, s, l);
      if (isa == Isa::kAvx2) return forward_avx2(f, s, l);
#endif
      forward_baseline(f, s, l);
    });
  }
};

class RenderGradOp : public RenderBase {
 public:
  using RenderBase::RenderBase;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& coeffs = ctx->input(0);
    const Tensor& upstream = ctx->input(1);
    if (!valid_coeffs(ctx, coeffs)) return;
    const Grid grid = make_grid(coeffs.dim_size(2), grid_size_);
    const int64 B = coeffs.dim_size(0), K = coeffs.dim_size(1);
    OP_REQUIRES(ctx, upstream.dims() == 2 && upstream.dim_size(0) == B &&
                         upstream.dim_size(1) == grid.rows * grid.size,
                InvalidArgument("upstream must be (B, V) = (", B, ", ", grid.rows * grid.size, "), got ",
                                upstream.shape().DebugString()));
    Tensor* grad = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, coeffs.shape(), &grad));
    const Backward w{coeffs.flat<double>().data(), upstream.flat<float>().data(), grad->flat<double>().data(), K,
                     &grid};
    const Isa isa = isa_;
    shard(ctx, B * K, grid.rows * grid.size * 15, [&w, isa](int64 s, int64 l) {
#if defined(__x86_64__)
      if (isa == Isa::kAvx512) return backward_avx512(w, s, l);
      if (isa == Isa::kAvx2) return backward_avx2(w, s, l);
#endif
      backward_baseline(w, s, l);
    });
  }
};

// sum_i exp(x_i), computed `repeats` times over the CPU threads (the roof's exponential rate).
class ExpSumOp : public RenderBase {
 public:
  explicit ExpSumOp(OpKernelConstruction* ctx) : RenderBase(ctx, 1) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("repeats", &repeats_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64 n = x.NumElements(), chunk = 4096;
    const float* data = x.flat<float>().data();
    const Isa isa = isa_;
    std::vector<float> partial((n + chunk - 1) / chunk, 0.0f);
    for (int rep = 0; rep < repeats_; ++rep) {
      shard(ctx, static_cast<int64>(partial.size()), chunk * 10, [&](int64 s, int64 l) {
        for (int64 c = s; c < l; ++c) {
          const int64 a = c * chunk, b = std::min(n, a + chunk);
#if defined(__x86_64__)
          if (isa == Isa::kAvx512) { partial[c] += exp_sum_avx512(data, a, b); continue; }
          if (isa == Isa::kAvx2) { partial[c] += exp_sum_avx2(data, a, b); continue; }
#endif
          partial[c] += exp_sum_baseline(data, a, b);
        }
      });
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    double total = 0.0;
    for (float p : partial) total += p;
    out->scalar<float>()() = static_cast<float>(total);
  }

 private:
  int repeats_;
};

class RenderIsaOp : public OpKernel {
 public:
  explicit RenderIsaOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tensorflow::tstring>()() = isa_name(chosen_isa());
  }
};

tensorflow::Status density_shape(tensorflow::shape_inference::InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle coeffs;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &coeffs));
  int grid_size;
  TF_RETURN_IF_ERROR(c->GetAttr("grid_size", &grid_size));
  auto m = c->Value(c->Dim(coeffs, 2));
  int64 v = c->kUnknownDim;
  if (m == 3 || m == 6 || m == 10) {
    v = 1;
    for (int d = 0; d < (m == 3 ? 1 : m == 6 ? 2 : 3); ++d) v *= grid_size;
  }
  c->set_output(0, c->Matrix(c->Dim(coeffs, 0), v));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("DeepDensityRender")
    .Input("coeffs: float64")
    .Output("density: float32")
    .Attr("grid_size: int")
    .SetShapeFn(density_shape)
    .Doc("sum_k exp(monomials(x_v) . coeffs[b, k]) at the grid's cell centres, (B, G^n).");

REGISTER_OP("DeepDensityRenderGrad")
    .Input("coeffs: float64")
    .Input("upstream: float32")
    .Output("grad: float64")
    .Attr("grid_size: int")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return tensorflow::OkStatus();
    })
    .Doc("The gradient of DeepDensityRender with respect to coeffs, given d loss / d density.");

REGISTER_OP("DeepDensityExpSum")
    .Input("x: float32")
    .Output("sum: float32")
    .Attr("repeats: int = 1")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("sum(exp(x)) with the rendering's exponential, `repeats` times: its rate, for make bench.");

REGISTER_OP("DeepDensityRenderIsa")
    .Output("isa: string")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("The instruction set the rendering kernels run with on this CPU and settings.");

REGISTER_KERNEL_BUILDER(Name("DeepDensityRender").Device(tensorflow::DEVICE_CPU), RenderOp);
REGISTER_KERNEL_BUILDER(Name("DeepDensityRenderGrad").Device(tensorflow::DEVICE_CPU), RenderGradOp);
REGISTER_KERNEL_BUILDER(Name("DeepDensityExpSum").Device(tensorflow::DEVICE_CPU), ExpSumOp);
REGISTER_KERNEL_BUILDER(Name("DeepDensityRenderIsa").Device(tensorflow::DEVICE_CPU), RenderIsaOp);
