// CUDA kernels of the math family, the GPU twin of kernels/cpu/math.cc: matrix products (cuBLAS),
// softmax, reductions, CumSum, normalizations and softmax cross-entropy, forward and backward side
// by side. The per-element arithmetic and the index maps live in math_rows.cuh (tested on the
// host).
//
// Determinism: no atomics. A sum over a row is one block: each thread accumulates a strided slice
// in double (int64 for integers), then a fixed tree in shared memory combines the slices; a sum
// over rows per column (dgamma, dbeta, ReduceSum over leading axes) is the same with a 2-D block
// (threads along x own columns, along y slices of rows). Block shapes depend only on the sizes, so
// a recompute gives the same bits. cuBLAS runs in exact fp32 (the handle's CUBLAS_PEDANTIC_MATH)
// unless ctx.tf32, with the workspace planned for the node, so it never allocates. Matrix
// products with bfloat16 A and B call cuBLAS's bf16 GEMM at CUBLAS_COMPUTE_32F with the
// same workspace; every other kernel here sees bfloat16 only through kernel.cu's f32 staging.
//
// Outputs are written with `=`; no kernel here runs in place (the schemas list no in-place
// inputs for this family).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/math_rows.cuh"

namespace foundry {

namespace {

namespace mr = math_rows;
using cuda::BlocksFor;
using cuda::CublasOf;
using cuda::StreamOf;

constexpr char kMs[] = "com.microsoft";
constexpr int kRowThreads = 256;  // a power of two: the block trees halve it
constexpr unsigned kMaxGrid = 65535 * 8;

Status Fail(const Node& n, const std::string& what) { return Error(n.Describe() + ": " + what); }

Status UnsupportedType(const Node& n, DType t) {
  return Fail(n, "the cuda kernel does not support element type " + std::string(DTypeName(t)));
}

StatusOr<int64_t> Axis(const Node& n, int64_t axis, int64_t rank) {
  auto a = NormalizeAxis(axis, rank);
  if (!a.ok()) return Fail(n, a.status().message());
  return a;
}

// Blocks for a loop of one block per unit (rows, lanes, column groups), capped: the loops stride.
unsigned GridFor(int64_t units) {
  if (units < 1) return 1;
  return units > kMaxGrid ? kMaxGrid : static_cast<unsigned>(units);
}

std::pair<int64_t, int64_t> SplitAt(const Shape& s, int64_t axis) {
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < axis ? rows : cols) *= s[i];
  return {rows, cols};
}

const Tensor* ConstantInput(const CudaKernelContext& ctx, size_t i) {
  return i < ctx.base.constant_inputs.size() ? ctx.base.constant_inputs[i] : nullptr;
}

// An optional output: null when omitted or not of `numel` elements (the CPU kernels' test).
template <class T>
T* OptionalOutput(std::span<Tensor* const> out, size_t i, int64_t numel) {
  return out.size() > i && out[i] && out[i]->numel() == numel ? out[i]->data<T>() : nullptr;
}

// ------------------------------ block trees ------------------------------

struct AddOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ double operator()(double a, double b) const { return mr::MaxIgnoringNaN(a, b); }
};

// Combines every thread's `v` over a 1-D block of power-of-two size; every thread gets the result.
// `sh` holds blockDim.x values.
template <class A, class Op>
__device__ A RowReduce(A v, A* sh, Op op) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = op(sh[t], sh[t + s]);
    __syncthreads();
  }
  A r = sh[0];
  __syncthreads();  // sh is reused by the caller's next reduction
  return r;
}

// Combines over threadIdx.y (power-of-two blockDim.y) for each threadIdx.x; the result is in
// sh[threadIdx.x] (row y = 0) after the call. `sh` holds blockDim.x * blockDim.y values.
template <class A, class Op>
__device__ void ColumnReduce(A v, A* sh, Op op) {
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
  sh[ty * bx + tx] = v;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s >>= 1) {
    if (ty < s) sh[ty * bx + tx] = op(sh[ty * bx + tx], sh[(ty + s) * bx + tx]);
    __syncthreads();
  }
}

// ============================== matrix products ==============================

template <class T>
struct Blas;
template <>
struct Blas<float> {
  static constexpr auto kGemm = cublasSgemmStridedBatched;
};
template <>
struct Blas<double> {
  static constexpr auto kGemm = cublasDgemmStridedBatched;
};

// cuBLAS's batch count is an int and some of its kernels put it on a grid dim of at most 65535.
constexpr int64_t kMaxGemmBatch = 65535;

// Row-major Y[m,n] = alpha op(A) op(B) + beta Y for `batch` matrices at the given element strides.
// cuBLAS is column-major: a row-major [r,c] matrix is its [c,r] transpose, so it computes
// Y^T = op(B)^T op(A)^T with the operands swapped.
template <class T>
Status GemmRowMajor(const Node& node, const CudaKernelContext& ctx, bool ta, bool tb, int64_t m,
                    int64_t n, int64_t k, T alpha, const T* a, int64_t stride_a, const T* b,
                    int64_t stride_b, T beta, T* y, int64_t stride_y, int64_t batch) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return Fail(node, "matrix dimensions exceed the cuBLAS int range");
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  for (int64_t first = 0; first < batch; first += kMaxGemmBatch) {
    const int count = static_cast<int>(std::min(kMaxGemmBatch, batch - first));
    FOUNDRY_CUBLAS_CHECK(
        node, Blas<T>::kGemm(CublasOf(ctx), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                             static_cast<int>(m), static_cast<int>(k), &alpha, b + first * stride_b,
                             ldb, stride_b, a + first * stride_a, lda, stride_a, &beta,
                             y + first * stride_y, static_cast<int>(n), stride_y, count));
  }
  return Status::Ok();
}

// The same with bfloat16 A and B (uint16_t bit patterns) and a bfloat16 or f32 Y:
// cublasGemmStridedBatchedEx at CUBLAS_COMPUTE_32F (each product exact in f32, sums in f32, Y
// rounded once), f32 alpha and beta, CUBLAS_GEMM_DEFAULT. Under WithBlas(..., bf16 = true).
template <class Y>
Status GemmRowMajorBf16(const Node& node, const CudaKernelContext& ctx, bool ta, bool tb, int64_t m,
                        int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t stride_a,
                        const uint16_t* b, int64_t stride_b, float beta, Y* y, int64_t stride_y,
                        int64_t batch) {
  static_assert(std::is_same_v<Y, uint16_t> || std::is_same_v<Y, float>);
  constexpr cudaDataType kY = std::is_same_v<Y, float> ? CUDA_R_32F : CUDA_R_16BF;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return Fail(node, "matrix dimensions exceed the cuBLAS int range");
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  for (int64_t first = 0; first < batch; first += kMaxGemmBatch) {
    const int count = static_cast<int>(std::min(kMaxGemmBatch, batch - first));
    FOUNDRY_CUBLAS_CHECK(
        node, cublasGemmStridedBatchedEx(
                  CublasOf(ctx), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                  static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                  b + first * stride_b, CUDA_R_16BF, ldb, stride_b, a + first * stride_a,
                  CUDA_R_16BF, lda, stride_a, &beta, y + first * stride_y, kY, static_cast<int>(n),
                  stride_y, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return Status::Ok();
}

// One row-major product for MatMulTyped / GemmTyped: T the operands' element type (uint16_t:
// bfloat16), Y the output's, S the scalars'.
template <class T, class Y, class S>
Status Gemm(const Node& node, const CudaKernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n,
            int64_t k, S alpha, const T* a, int64_t stride_a, const T* b, int64_t stride_b, S beta,
            Y* y, int64_t stride_y, int64_t batch) {
  if constexpr (std::is_same_v<T, uint16_t>)
    return GemmRowMajorBf16<Y>(node, ctx, ta, tb, m, n, k, alpha, a, stride_a, b, stride_b, beta, y,
                               stride_y, batch);
  else
    return GemmRowMajor<T>(node, ctx, ta, tb, m, n, k, alpha, a, stride_a, b, stride_b, beta, y,
                           stride_y, batch);
}

// Runs `body` with cuBLAS bound to the node's planned workspace (cuBLAS gives the same bits run to
// run with a fixed workspace on one stream) and a math mode for the operands: f32 exact (the
// handle's pedantic mode) unless ctx.tf32 (TF32 tensor cores); bfloat16 operands (`bf16`) on
// tensor cores, whose bf16 products are exact in their f32 accumulators, with every reduction
// (split-K included) in f32, never in a bf16 output's type. The handle's math mode is restored
// on every path.
template <class F>
Status WithBlas(const Node& node, const CudaKernelContext& ctx, bool bf16, F body) {
  if (static_cast<int64_t>(ctx.base.workspace.size()) < kCublasWorkspaceBytes)
    return Fail(node, "the cuBLAS workspace was not planned (" +
                          std::to_string(ctx.base.workspace.size()) + " bytes given, " +
                          std::to_string(kCublasWorkspaceBytes) + " needed)");
  cublasHandle_t h = CublasOf(ctx);
  FOUNDRY_CUBLAS_CHECK(node, cublasSetWorkspace(h, ctx.base.workspace.data(),
                                                static_cast<size_t>(kCublasWorkspaceBytes)));
  if (!ctx.tf32 && !bf16) return body();
  const cublasMath_t mode =
      bf16 ? static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
           : CUBLAS_TF32_TENSOR_OP_MATH;
  cublasMath_t saved;
  FOUNDRY_CUBLAS_CHECK(node, cublasGetMathMode(h, &saved));
  FOUNDRY_CUBLAS_CHECK(node, cublasSetMathMode(h, mode));
  Status st = body();
  FOUNDRY_CUBLAS_CHECK(node, cublasSetMathMode(h, saved));
  return st;
}

// T: A's and B's element type (uint16_t: bfloat16), Y: the output's, S: alpha's.
template <class T, class Yt = T, class S = T>
Status MatMulTyped(const Node& node, const Tensor& A, const Tensor& B, Tensor& Y, bool ta, bool tb,
                   S alpha, const CudaKernelContext& ctx) {
  mr::MatMulPlan p;
  if (std::string err = mr::MakeMatMulPlan(A.shape(), B.shape(), ta, tb, &p); !err.empty())
    return Fail(node, err);
  if (Y.numel() != p.batches * p.m * p.n)
    return Fail(node, "output has shape " + ShapeToString(Y.shape()) + ", the product needs " +
                          std::to_string(p.batches * p.m * p.n) + " elements");
  if (Y.numel() == 0) return Status::Ok();
  Yt* y = Y.data<Yt>();
  if (p.k == 0) {
    FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(y, 0, Y.nbytes(), StreamOf(ctx)));
    return Status::Ok();
  }
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  return WithBlas(node, ctx, std::is_same_v<T, uint16_t>, [&]() -> Status {
    if (p.fold_rows)
      return Gemm<T, Yt, S>(node, ctx, false, tb, p.batches * p.m, p.n, p.k, alpha, a, 0, b, 0,
                            S(0), y, 0, 1);
    for (int64_t first = 0; first < p.batches; first += p.group) {
      int64_t ai = 0, bi = 0;
      mr::MatMulBatchOperands(p, first, &ai, &bi);
      const auto gemm = Gemm<T, Yt, S>;
      RETURN_IF_ERROR(gemm(node, ctx, ta, tb, p.m, p.n, p.k, alpha, a + ai * p.a_mat,
                           p.group_a_stride * p.a_mat, b + bi * p.b_mat, p.group_b_stride * p.b_mat,
                           S(0), y + first * p.m * p.n, p.m * p.n, p.group));
    }
    return Status::Ok();
  });
}

// MatMul (A, B) -> Y and com.microsoft FusedMatMul (A, B) -> Y {transA, transB, alpha}.
Status MatMulKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  if (node.GetInt("transBatchA", 0) != 0 || node.GetInt("transBatchB", 0) != 0)
    return Fail(node, "transBatchA/transBatchB are not supported");
  bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  float alpha = node.GetFloat("alpha", 1.0f);
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return MatMulTyped<float>(node, *in[0], *in[1], *out[0], ta, tb, alpha, ctx);
    case DType::kFloat64:
      return MatMulTyped<double>(node, *in[0], *in[1], *out[0], ta, tb, alpha, ctx);
    case DType::kBFloat16:  // with a bfloat16 B (CudaTakesBf16Directly; else it was staged)
      if (in[1]->dtype() != DType::kBFloat16) return UnsupportedType(node, in[1]->dtype());
      if (out[0]->dtype() == DType::kBFloat16)
        return MatMulTyped<uint16_t, uint16_t, float>(node, *in[0], *in[1], *out[0], ta, tb, alpha,
                                                      ctx);
      if (out[0]->dtype() == DType::kFloat32)
        return MatMulTyped<uint16_t, float, float>(node, *in[0], *in[1], *out[0], ta, tb, alpha,
                                                   ctx);
      return UnsupportedType(node, out[0]->dtype());
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// A bfloat16 (uint16_t) element as the scalar type S, and back (rounded once); others as they are.
template <class S, class E>
__device__ S ElementValue(E e) {
  if constexpr (std::is_same_v<E, uint16_t>)
    return static_cast<S>(Bf16ToFloat(e));
  else
    return static_cast<S>(e);
}
template <class E, class S>
__device__ E ElementOf(S v) {
  if constexpr (std::is_same_v<E, uint16_t>)
    return FloatToBf16(static_cast<float>(v));
  else
    return static_cast<E>(v);
}

// y[i, j] = scale * c[i * si + j * sj]: Gemm's C broadcast to [m, n] (a bfloat16 C widened
// exactly, a bfloat16 y rounded once).
template <class Y, class C, class S>
__global__ void BroadcastC(Y* y, const C* c, int64_t m, int64_t n, int64_t si, int64_t sj,
                           S scale) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < m * n;
       e += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t i = e / n, j = e % n;
    y[e] = ElementOf<Y>(scale * ElementValue<S>(c[i * si + j * sj]));
  }
}

// Gemm (A, B[, C]) -> Y = alpha * op(A) op(B) + beta * C, C broadcast to [M, N]. T: A's and B's
// element type (uint16_t: bfloat16), Yt: the output's, Ct: C's, S: the scalars'.
template <class T, class Yt = T, class Ct = Yt, class S = T>
Status GemmTyped(const Node& node, const Tensor& A, const Tensor& B, const Tensor* C, Tensor& Y,
                 const CudaKernelContext& ctx) {
  bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  S alpha = node.GetFloat("alpha", 1.0f), beta = node.GetFloat("beta", 1.0f);
  if (A.rank() != 2 || B.rank() != 2)
    return Fail(node, "A and B must be matrices, got " + ShapeToString(A.shape()) + " and " +
                          ShapeToString(B.shape()));
  const int64_t m = ta ? A.shape()[1] : A.shape()[0], k = ta ? A.shape()[0] : A.shape()[1];
  const int64_t n = tb ? B.shape()[0] : B.shape()[1];
  if ((tb ? B.shape()[1] : B.shape()[0]) != k || Y.numel() != m * n)
    return Fail(node, "A " + ShapeToString(A.shape()) + " and B " + ShapeToString(B.shape()) +
                          " do not give the output " + ShapeToString(Y.shape()));
  if (m == 0 || n == 0) return Status::Ok();
  Yt* y = Y.data<Yt>();
  const bool use_c = C != nullptr && beta != S(0);
  if (use_c) {
    Shape cs = C->shape();
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    const int64_t si = cs[0] == 1 ? 0 : cs[1], sj = cs[1] == 1 ? 0 : 1;
    // With k == 0 the product is empty and Y is beta * C; otherwise cuBLAS scales C by beta.
    BroadcastC<Yt, Ct, S><<<BlocksFor(m * n), cuda::kThreads, 0, StreamOf(ctx)>>>(
        y, C->data<Ct>(), m, n, si, sj, k == 0 ? beta : S(1));
    FOUNDRY_CUDA_LAUNCHED(node, "BroadcastC");
  }
  if (k == 0) {
    if (!use_c) FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(y, 0, Y.nbytes(), StreamOf(ctx)));
    return Status::Ok();
  }
  return WithBlas(node, ctx, std::is_same_v<T, uint16_t>, [&]() -> Status {
    return Gemm<T, Yt, S>(node, ctx, ta, tb, m, n, k, alpha, A.data<T>(), 0, B.data<T>(), 0,
                          use_c ? beta : S(0), y, 0, 1);
  });
}

Status GemmKernel(const Node& node, std::span<const Tensor* const> in, std::span<Tensor* const> out,
                  const CudaKernelContext& ctx) {
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return GemmTyped<float>(node, *in[0], *in[1], c, *out[0], ctx);
    case DType::kFloat64:
      return GemmTyped<double>(node, *in[0], *in[1], c, *out[0], ctx);
    case DType::kBFloat16: {  // with a bfloat16 B (CudaTakesBf16Directly; else it was staged)
      const DType y = out[0]->dtype(), ct = c ? c->dtype() : y;
      if (in[1]->dtype() != DType::kBFloat16) return UnsupportedType(node, in[1]->dtype());
      if (y == DType::kBFloat16 && ct == DType::kBFloat16)
        return GemmTyped<uint16_t, uint16_t, uint16_t, float>(node, *in[0], *in[1], c, *out[0],
                                                              ctx);
      if (y == DType::kFloat32 && ct == DType::kFloat32)
        return GemmTyped<uint16_t, float, float, float>(node, *in[0], *in[1], c, *out[0], ctx);
      if (y == DType::kFloat32 && ct == DType::kBFloat16)
        return GemmTyped<uint16_t, float, uint16_t, float>(node, *in[0], *in[1], c, *out[0], ctx);
      return UnsupportedType(node, ct == y ? y : ct);
    }
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

int64_t MatMulWorkspace(const Node&, std::span<const OperandType>, std::span<const OperandType>) {
  return kCublasWorkspaceBytes;
}

// ============================== softmax ==============================

// One block per lane (outer x inner lanes of n elements at stride `inner`).
template <class T, bool kLog>
__global__ void SoftmaxLanes(T* y, const T* x, int64_t lanes, int64_t n, int64_t inner) {
  __shared__ double sh[kRowThreads];
  for (int64_t lane = blockIdx.x; lane < lanes; lane += gridDim.x) {
    const int64_t base = (lane / inner) * n * inner + lane % inner;
    double m = -HUGE_VAL;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      m = mr::MaxIgnoringNaN(m, static_cast<double>(x[base + j * inner]));
    m = RowReduce(m, sh, MaxOp{});
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += exp(static_cast<double>(x[base + j * inner]) - m);
    sum = RowReduce(sum, sh, AddOp{});
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t p = base + j * inner;
      y[p] = static_cast<T>(mr::SoftmaxOut<kLog>(static_cast<double>(x[p]), m, sum));
    }
  }
}

template <class T, bool kLog>
__global__ void SoftmaxGradLanes(T* dx, const T* dy, const T* y, int64_t lanes, int64_t n,
                                 int64_t inner) {
  __shared__ double sh[kRowThreads];
  for (int64_t lane = blockIdx.x; lane < lanes; lane += gridDim.x) {
    const int64_t base = (lane / inner) * n * inner + lane % inner;
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t p = base + j * inner;
      s += mr::SoftmaxGradTerm<kLog>(dy[p], y[p]);
    }
    s = RowReduce(s, sh, AddOp{});
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t p = base + j * inner;
      dx[p] = static_cast<T>(mr::SoftmaxGradOut<kLog>(dy[p], y[p], s));
    }
  }
}

struct Lanes {
  int64_t lanes = 0, n = 0, inner = 1;
};
StatusOr<Lanes> LanesOf(const Node& node, const Shape& s) {
  ASSIGN_OR_RETURN(int64_t axis,
                   Axis(node, node.GetInt("axis", -1), static_cast<int64_t>(s.size())));
  Lanes l;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  l.n = s[axis];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) l.inner *= s[i];
  l.lanes = outer * l.inner;
  return l;
}

template <class T, bool kLog>
Status SoftmaxTyped(const Node& node, const Tensor& X, Tensor& Y, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(Lanes l, LanesOf(node, X.shape()));
  if (X.numel() == 0) return Status::Ok();
  SoftmaxLanes<T, kLog><<<GridFor(l.lanes), kRowThreads, 0, StreamOf(ctx)>>>(
      Y.data<T>(), X.data<T>(), l.lanes, l.n, l.inner);
  FOUNDRY_CUDA_LAUNCHED(node, "SoftmaxLanes");
  return Status::Ok();
}

template <bool kLog>
Status SoftmaxKernel(const Node& node, std::span<const Tensor* const> in,
                     std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return SoftmaxTyped<float, kLog>(node, *in[0], *out[0], ctx);
    case DType::kFloat64:
      return SoftmaxTyped<double, kLog>(node, *in[0], *out[0], ctx);
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

template <class T, bool kLog>
Status SoftmaxGradTyped(const Node& node, const Tensor& DY, const Tensor& Y, Tensor& DX,
                        const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(Lanes l, LanesOf(node, Y.shape()));
  if (DY.numel() != Y.numel() || DX.numel() != Y.numel())
    return Fail(
        node, "dY " + ShapeToString(DY.shape()) + " and Y " + ShapeToString(Y.shape()) + " differ");
  if (Y.numel() == 0) return Status::Ok();
  SoftmaxGradLanes<T, kLog><<<GridFor(l.lanes), kRowThreads, 0, StreamOf(ctx)>>>(
      DX.data<T>(), DY.data<T>(), Y.data<T>(), l.lanes, l.n, l.inner);
  FOUNDRY_CUDA_LAUNCHED(node, "SoftmaxGradLanes");
  return Status::Ok();
}

template <bool kLog>
Status SoftmaxGradKernel(const Node& node, std::span<const Tensor* const> in,
                         std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return SoftmaxGradTyped<float, kLog>(node, *in[0], *in[1], *out[0], ctx);
    case DType::kFloat64:
      return SoftmaxGradTyped<double, kLog>(node, *in[0], *in[1], *out[0], ctx);
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// ============================== reductions ==============================

// One block per group of blockDim.x outputs: thread (x, y) accumulates output x's reduced elements
// y, y + blockDim.y, ... in order, then a tree over y. blockDim is (32, 8) when neighbouring
// outputs are neighbours in memory (coalesced reads), else (1, 256).
template <class T, int kOp>
__global__ void ReduceGroups(T* y, const T* x, mr::ReducePlan p) {
  using R = mr::Reducer<T, kOp>;
  using Acc = typename R::Acc;
  __shared__ Acc sh[kRowThreads];
  const int64_t groups = (p.out_n + blockDim.x - 1) / blockDim.x;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t o = g * blockDim.x + threadIdx.x;
    Acc acc = R::Init();
    if (o < p.out_n) {
      const T* base = x + mr::KeptOffset(p, o);
      for (int64_t r = threadIdx.y; r < p.red_n; r += blockDim.y)
        acc = R::Step(acc, base[mr::ReducedOffset(p, r)]);
    }
    ColumnReduce(acc, sh, [](Acc a, Acc b) { return R::Combine(a, b); });
    if (threadIdx.y == 0 && o < p.out_n) y[o] = R::Finish(sh[threadIdx.x], p.red_n);
    __syncthreads();
  }
}

template <class T, int kOp>
Status ReduceTyped(const Node& node, const Tensor& X, const std::vector<bool>& reduced, Tensor& Y,
                   const CudaKernelContext& ctx) {
  bool keepdims = node.GetInt("keepdims", 1) != 0;
  Shape expect;
  for (int64_t i = 0; i < X.rank(); ++i)
    if (!reduced[i])
      expect.push_back(X.shape()[i]);
    else if (keepdims)
      expect.push_back(1);
  if (Y.shape() != expect)
    return Fail(node, "output was allocated as " + ShapeToString(Y.shape()) +
                          ", the reduction gives " + ShapeToString(expect));
  mr::ReducePlan p;
  if (std::string err = mr::MakeReducePlan(X.shape(), reduced, &p); !err.empty())
    return Fail(node, err);
  if (p.out_n == 0) return Status::Ok();
  const dim3 block = p.inner_kept ? dim3(32, kRowThreads / 32) : dim3(1, kRowThreads);
  const int64_t groups = (p.out_n + block.x - 1) / block.x;
  ReduceGroups<T, kOp><<<GridFor(groups), block, 0, StreamOf(ctx)>>>(Y.data<T>(), X.data<T>(), p);
  FOUNDRY_CUDA_LAUNCHED(node, "ReduceGroups");
  return Status::Ok();
}

// Which axes: the `axes` attribute, else input 1 (a compile-time constant on this backend); empty
// means all axes, or none with noop_with_empty_axes.
StatusOr<std::vector<bool>> ReducedAxes(const Node& node, std::span<const Tensor* const> in,
                                        const CudaKernelContext& ctx, int64_t rank) {
  std::vector<int64_t> axes;
  if (node.HasAttr("axes")) {
    axes = node.GetInts("axes");
  } else if (in.size() > 1 && in[1]) {
    const Tensor* c = ConstantInput(ctx, 1);
    if (!c)
      return Fail(
          node, "input 1 ('axes') must be a constant on the cuda backend; fold it at compile time");
    axes = c->ToInt64Vector();
  }
  bool noop = node.GetInt("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(rank, axes.empty() && !noop);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t na, Axis(node, a, rank));
    if (reduced[na]) return Fail(node, "axis " + std::to_string(a) + " appears twice in axes");
    reduced[na] = true;
  }
  return reduced;
}

template <int kOp>
Status ReduceKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(node, in, ctx, in[0]->rank()));
  constexpr bool kFloatOnly = kOp == mr::kL1 || kOp == mr::kL2 || kOp == mr::kSumSquare ||
                              kOp == mr::kLogSum || kOp == mr::kLogSumExp;
  const Tensor& X = *in[0];
  Tensor& Y = *out[0];
  switch (X.dtype()) {
    case DType::kFloat32:
      return ReduceTyped<float, kOp>(node, X, reduced, Y, ctx);
    case DType::kFloat64:
      return ReduceTyped<double, kOp>(node, X, reduced, Y, ctx);
    case DType::kInt64:
      if constexpr (!kFloatOnly) return ReduceTyped<int64_t, kOp>(node, X, reduced, Y, ctx);
      break;
    case DType::kInt32:
      if constexpr (!kFloatOnly) return ReduceTyped<int32_t, kOp>(node, X, reduced, Y, ctx);
      break;
    default:
      break;
  }
  return UnsupportedType(node, X.dtype());
}

// ============================== running sums ==============================

// One thread per line, sequential along the axis (math_rows.cuh): bitwise the CPU's sums.
template <class T>
__global__ void CumSumLines(T* y, const T* x, mr::CumSumPlan p) {
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; l < p.lines;
       l += static_cast<int64_t>(blockDim.x) * gridDim.x)
    mr::CumSumLine(p, l, y, x);
}

// CumSum (x, axis): the axis must be a compile-time constant on this backend.
Status CumSumKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& X = *in[0];
  Tensor& Y = *out[0];
  const Tensor* axis = ConstantInput(ctx, 1);
  if (!axis)
    return Fail(node,
                "input 1 ('axis') must be a constant on the cuda backend; fold it at compile time");
  if (axis->dtype() != DType::kInt64 && axis->dtype() != DType::kInt32)
    return Fail(node, "axis must be i64 or i32, got " + std::string(DTypeName(axis->dtype())));
  if (axis->rank() > 1 || axis->numel() != 1)
    return Fail(node, "axis must be a 0-D (or one-element) tensor, has shape " +
                          ShapeToString(axis->shape()));
  mr::CumSumPlan p;
  if (std::string err =
          mr::MakeCumSumPlan(X.shape(), axis->GetAsInt64(0), node.GetInt("exclusive", 0),
                             node.GetInt("reverse", 0), &p);
      !err.empty())
    return Fail(node, err);
  if (Y.dtype() != X.dtype() || Y.shape() != X.shape())
    return Fail(node, "output was allocated as " + std::string(DTypeName(Y.dtype())) +
                          ShapeToString(Y.shape()) + ", x is " + std::string(DTypeName(X.dtype())) +
                          ShapeToString(X.shape()));
  if (X.numel() == 0) return Status::Ok();
  auto launch = [&](auto tag) -> Status {
    using T = decltype(tag);
    CumSumLines<T>
        <<<BlocksFor(p.lines), cuda::kThreads, 0, StreamOf(ctx)>>>(Y.data<T>(), X.data<T>(), p);
    FOUNDRY_CUDA_LAUNCHED(node, "CumSumLines");
    return Status::Ok();
  };
  switch (X.dtype()) {
    case DType::kFloat32:
      return launch(float{});
    case DType::kFloat64:
      return launch(double{});
    case DType::kInt32:
      return launch(int32_t{});
    case DType::kInt64:
      return launch(int64_t{});
    default:
      return UnsupportedType(node, X.dtype());
  }
}

// ============================== normalizations ==============================

Status CheckParam(const Node& node, const Tensor* p, const char* what, int64_t cols) {
  if (p && p->numel() != cols)
    return Fail(node, std::string(what) + " has " + std::to_string(p->numel()) +
                          " elements, the normalized dims have " + std::to_string(cols));
  return Status::Ok();
}

// LayerNormalization, one block per row: mean, then mean of squared deviations, both in double.
__global__ void LayerNormRows(float* y, float* mean_out, float* inv_out, const float* x,
                              const float* scale, const float* bias, int64_t rows, int64_t cols,
                              double eps) {
  __shared__ double sh[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += xr[j];
    const double mean = RowReduce(sum, sh, AddOp{}) / static_cast<double>(cols);
    double sq = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double d = xr[j] - mean;
      sq += d * d;
    }
    const double inv = mr::LayerNormInv(RowReduce(sq, sh, AddOp{}), cols, eps);
    float* yr = y + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = mr::LayerNormOut(xr[j], mean, inv, scale[j], bias, j);
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = static_cast<float>(mean);
      if (inv_out) inv_out[r] = static_cast<float>(inv);
    }
  }
}

// SimplifiedLayerNormalization (RMSNorm), one block per row.
__global__ void RmsNormRows(float* y, float* inv_out, const float* x, const float* w, int64_t rows,
                            int64_t cols, float eps) {
  __shared__ double sh[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    double sq = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sq += mr::RmsSquare(xr[j]);
    const float inv = mr::RmsInv(RowReduce(sq, sh, AddOp{}), cols, eps);
    float* yr = y + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = mr::RmsOut(xr[j], inv, w[j]);
    if (threadIdx.x == 0 && inv_out) inv_out[r] = inv;
  }
}

Status LayerNormKernel(const Node& node, std::span<const Tensor* const> in,
                       std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& X = *in[0];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  auto [rows, cols] = SplitAt(X.shape(), axis);
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  RETURN_IF_ERROR(CheckParam(node, in[1], "scale", cols));
  RETURN_IF_ERROR(CheckParam(node, bias, "bias", cols));
  if (X.numel() == 0) return Status::Ok();
  LayerNormRows<<<GridFor(rows), kRowThreads, 0, StreamOf(ctx)>>>(
      out[0]->data<float>(), OptionalOutput<float>(out, 1, rows),
      OptionalOutput<float>(out, 2, rows), X.data<float>(), in[1]->data<float>(),
      bias ? bias->data<float>() : nullptr, rows, cols, node.GetFloat("epsilon", 1e-5f));
  FOUNDRY_CUDA_LAUNCHED(node, "LayerNormRows");
  return Status::Ok();
}

Status SimplifiedLayerNormKernel(const Node& node, std::span<const Tensor* const> in,
                                 std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& X = *in[0];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  auto [rows, cols] = SplitAt(X.shape(), axis);
  RETURN_IF_ERROR(CheckParam(node, in[1], "scale", cols));
  if (X.numel() == 0) return Status::Ok();
  RmsNormRows<<<GridFor(rows), kRowThreads, 0, StreamOf(ctx)>>>(
      out[0]->data<float>(), OptionalOutput<float>(out, 1, rows), X.data<float>(),
      in[1]->data<float>(), rows, cols, node.GetFloat("epsilon", 1e-5f));
  FOUNDRY_CUDA_LAUNCHED(node, "RmsNormRows");
  return Status::Ok();
}

// dX of (Simplified)LayerNormalizationGrad, one block per row. mean is null for RMSNorm.
__global__ void LayerNormGradRows(float* dx, const float* dy, const float* x, const float* scale,
                                  const float* mean, const float* inv, int64_t rows, int64_t cols) {
  __shared__ double sh[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    const double m = mean ? mean[r] : 0.0, iv = inv[r];
    double s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double g = static_cast<double>(dyr[j]) * scale[j];
      s1 += g;
      s2 += g * mr::LnXhat(xr[j], m, iv);
    }
    // RMSNorm has no mean subtraction, so no mean(g) term.
    const double c1 = mean ? RowReduce(s1, sh, AddOp{}) / static_cast<double>(cols) : 0.0;
    const double c2 = RowReduce(s2, sh, AddOp{}) / static_cast<double>(cols);
    float* dxr = dx + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double g = static_cast<double>(dyr[j]) * scale[j];
      dxr[j] = static_cast<float>(mr::LnDx(iv, g, c1, mr::LnXhat(xr[j], m, iv), c2));
    }
  }
}

// dscale[j] = sum_r dY * xhat and dbias[j] = sum_r dY: per column over rows, 2-D blocks of
// kColumnX columns x kColumnY row slices (coalesced: neighbouring threads read neighbouring
// columns). Either output may be null.
constexpr int kColumnX = 32, kColumnY = 16;
__global__ void LayerNormGradColumns(float* dscale, float* dbias, const float* dy, const float* x,
                                     const float* mean, const float* inv, int64_t rows,
                                     int64_t cols) {
  __shared__ double sh_s[kColumnX * kColumnY];
  __shared__ double sh_b[kColumnX * kColumnY];
  const int64_t groups = (cols + kColumnX - 1) / kColumnX;
  for (int64_t gi = blockIdx.x; gi < groups; gi += gridDim.x) {
    const int64_t j = gi * kColumnX + threadIdx.x;
    double s = 0, b = 0;
    if (j < cols) {
      for (int64_t r = threadIdx.y; r < rows; r += kColumnY) {
        const double d = dy[r * cols + j];
        s += d * mr::LnXhat(x[r * cols + j], mean ? mean[r] : 0.0, inv[r]);
        b += d;
      }
    }
    ColumnReduce(s, sh_s, AddOp{});
    ColumnReduce(b, sh_b, AddOp{});
    if (threadIdx.y == 0 && j < cols) {
      if (dscale) dscale[j] = static_cast<float>(sh_s[threadIdx.x]);
      if (dbias) dbias[j] = static_cast<float>(sh_b[threadIdx.x]);
    }
    __syncthreads();
  }
}

// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev) -> (dX[, dscale, dbias]) and
// SimplifiedLayerNormalizationGrad (dY, X, scale, inv_std_var) -> (dX[, dscale]).
Status LayerNormGradKernel(const Node& node, std::span<const Tensor* const> in,
                           std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& X = *in[1];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  auto [rows, cols] = SplitAt(X.shape(), axis);
  RETURN_IF_ERROR(CheckParam(node, in[2], "scale", cols));
  const bool simplified = node.op_type == "SimplifiedLayerNormalizationGrad";
  const Tensor* mean_t = simplified ? nullptr : in[3];
  const Tensor* inv_t = simplified ? in[3] : in[4];
  if ((mean_t && mean_t->numel() != rows) || inv_t->numel() != rows)
    return Fail(node, "the saved statistics need " + std::to_string(rows) + " elements");
  const float* mean = mean_t ? mean_t->data<float>() : nullptr;
  if (rows > 0 && cols > 0) {
    LayerNormGradRows<<<GridFor(rows), kRowThreads, 0, StreamOf(ctx)>>>(
        out[0]->data<float>(), in[0]->data<float>(), X.data<float>(), in[2]->data<float>(), mean,
        inv_t->data<float>(), rows, cols);
    FOUNDRY_CUDA_LAUNCHED(node, "LayerNormGradRows");
  }
  float* dscale = OptionalOutput<float>(out, 1, cols);
  float* dbias = OptionalOutput<float>(out, 2, cols);
  if ((dscale || dbias) && cols > 0) {
    LayerNormGradColumns<<<GridFor((cols + kColumnX - 1) / kColumnX), dim3(kColumnX, kColumnY), 0,
                           StreamOf(ctx)>>>(dscale, dbias, in[0]->data<float>(), X.data<float>(),
                                            mean, inv_t->data<float>(), rows, cols);
    FOUNDRY_CUDA_LAUNCHED(node, "LayerNormGradColumns");
  }
  return Status::Ok();
}

// ============================== softmax cross-entropy ==============================

struct CeLayout {
  int64_t n = 0, c = 0, inner = 1;  // scores [N, C, inner]
};

StatusOr<CeLayout> CeLayoutOf(const Node& node, const Tensor& scores, const Tensor& labels) {
  if (scores.rank() < 2) return Fail(node, "scores must have rank >= 2");
  CeLayout l;
  l.n = scores.shape()[0];
  l.c = scores.shape()[1];
  for (int64_t i = 2; i < scores.rank(); ++i) l.inner *= scores.shape()[i];
  if (labels.numel() != l.n * l.inner)
    return Fail(node, "labels of shape " + ShapeToString(labels.shape()) + " do not match scores " +
                          ShapeToString(scores.shape()));
  return l;
}

enum CeReduction { kCeNone, kCeSum, kCeMean };
StatusOr<CeReduction> CeReductionOf(const Node& node) {
  std::string r = node.GetString("reduction", "mean");
  if (r == "none") return kCeNone;
  if (r == "sum") return kCeSum;
  if (r == "mean") return kCeMean;
  return Fail(node, "reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
}

struct CeTargets {
  bool has_ignore = false;
  int64_t ignore = 0;
};

// One block per sample: log-softmax over the classes, the sample's weighted loss (NaN for a label
// outside [0, C) that is not ignore_index), written to `loss` ("none") or to the per-sample
// scratch `sample_loss` / `sample_weight` that CeTotal sums.
template <class L>
__global__ void CeSamples(float* loss, double* sample_loss, double* sample_weight, float* log_prob,
                          const float* s, const L* labels, const float* w, CeLayout l,
                          CeTargets tg) {
  __shared__ double sh[kRowThreads];
  const int64_t samples = l.n * l.inner;
  for (int64_t k = blockIdx.x; k < samples; k += gridDim.x) {
    const int64_t base = (k / l.inner) * l.c * l.inner + k % l.inner;
    double m = -HUGE_VAL;
    for (int64_t c = threadIdx.x; c < l.c; c += blockDim.x)
      m = mr::MaxIgnoringNaN(m, static_cast<double>(s[base + c * l.inner]));
    m = RowReduce(m, sh, MaxOp{});
    double sum = 0;
    for (int64_t c = threadIdx.x; c < l.c; c += blockDim.x) sum += exp(s[base + c * l.inner] - m);
    const double log_sum = log(RowReduce(sum, sh, AddOp{}));
    if (log_prob)
      for (int64_t c = threadIdx.x; c < l.c; c += blockDim.x)
        log_prob[base + c * l.inner] = static_cast<float>((s[base + c * l.inner] - m) - log_sum);
    if (threadIdx.x == 0) {
      const int64_t t =
          mr::CeTarget(static_cast<int64_t>(labels[k]), tg.has_ignore, tg.ignore, l.c);
      double li = 0, wk = 0;
      if (t >= 0) {
        wk = w ? w[t] : 1.0;
        li = -((s[base + t * l.inner] - m) - log_sum) * wk;
      } else if (t == mr::kBadLabel) {
        li = wk = NAN;
      }
      if (loss) loss[k] = static_cast<float>(li);
      if (sample_loss) {
        sample_loss[k] = li;
        sample_weight[k] = wk;
      }
    }
  }
}

// One block: loss = the sum of the per-sample losses, or, for "mean", that sum over the sum of the
// weights (0 when every target is ignored).
__global__ void CeTotal(float* loss, const double* sample_loss, const double* sample_weight,
                        int64_t samples, bool mean) {
  __shared__ double sh[kRowThreads];
  double total = 0, wsum = 0;
  for (int64_t k = threadIdx.x; k < samples; k += blockDim.x) {
    total += sample_loss[k];
    wsum += sample_weight[k];
  }
  total = RowReduce(total, sh, AddOp{});
  wsum = RowReduce(wsum, sh, AddOp{});
  if (threadIdx.x == 0)
    loss[0] = static_cast<float>(!mean ? total : (wsum == 0 ? 0.0 : total / wsum));
}

template <class L>
Status CeForward(const Node& node, std::span<const Tensor* const> in, std::span<Tensor* const> out,
                 const CudaKernelContext& ctx, const CeLayout& l, CeReduction red) {
  const CeTargets tg{node.HasAttr("ignore_index"), node.GetInt("ignore_index", 0)};
  const float* w = in.size() > 2 && in[2] ? in[2]->data<float>() : nullptr;
  float* log_prob = OptionalOutput<float>(out, 1, in[0]->numel());
  const int64_t samples = l.n * l.inner;
  double* sample_loss =
      red == kCeNone ? nullptr : reinterpret_cast<double*>(ctx.base.workspace.data());
  double* sample_weight = sample_loss ? sample_loss + samples : nullptr;
  if (samples > 0) {
    CeSamples<L><<<GridFor(samples), kRowThreads, 0, StreamOf(ctx)>>>(
        red == kCeNone ? out[0]->data<float>() : nullptr, sample_loss, sample_weight, log_prob,
        in[0]->data<float>(), in[1]->data<L>(), w, l, tg);
    FOUNDRY_CUDA_LAUNCHED(node, "CeSamples");
  }
  if (red != kCeNone) {
    CeTotal<<<1, kRowThreads, 0, StreamOf(ctx)>>>(out[0]->data<float>(), sample_loss, sample_weight,
                                                  samples, red == kCeMean);
    FOUNDRY_CUDA_LAUNCHED(node, "CeTotal");
  }
  return Status::Ok();
}

// SoftmaxCrossEntropyLoss (scores, labels[, weights]) -> (loss[, log_prob]).
Status SoftmaxCrossEntropyKernel(const Node& node, std::span<const Tensor* const> in,
                                 std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& S = *in[0];
  if (S.dtype() != DType::kFloat32) return UnsupportedType(node, S.dtype());
  ASSIGN_OR_RETURN(CeLayout l, CeLayoutOf(node, S, *in[1]));
  ASSIGN_OR_RETURN(CeReduction red, CeReductionOf(node));
  switch (in[1]->dtype()) {
    case DType::kInt64:
      return CeForward<int64_t>(node, in, out, ctx, l, red);
    case DType::kInt32:
      return CeForward<int32_t>(node, in, out, ctx, l, red);
    default:
      return UnsupportedType(node, in[1]->dtype());
  }
}

// Per-sample scratch for the sum / mean: a loss and a weight, in double.
int64_t CeWorkspace(const Node& node, std::span<const OperandType> in,
                    std::span<const OperandType>) {
  if (node.GetString("reduction", "mean") == "none" || in.size() < 2 || !in[1].shape) return 0;
  return 2 * static_cast<int64_t>(sizeof(double)) * NumElements(*in[1].shape);
}

// One block: the sum of the non-ignored targets' weights, for "mean" (NaN with a bad label).
template <class L>
__global__ void CeWeightSum(double* out, const L* labels, const float* w, int64_t samples,
                            int64_t classes, CeTargets tg) {
  __shared__ double sh[kRowThreads];
  double sum = 0;
  for (int64_t k = threadIdx.x; k < samples; k += blockDim.x) {
    const int64_t t =
        mr::CeTarget(static_cast<int64_t>(labels[k]), tg.has_ignore, tg.ignore, classes);
    if (t >= 0)
      sum += w ? w[t] : 1.0;
    else if (t == mr::kBadLabel)
      sum += NAN;
  }
  sum = RowReduce(sum, sh, AddOp{});
  if (threadIdx.x == 0) out[0] = sum;
}

// d_scores[n, c, i] = (exp(log_prob) - [c == t]) * w[t] * g with g = dY ("sum"), dY / weight sum
// ("mean", 0 when it is 0), dY[n, i] ("none"); 0 for ignored targets, NaN for bad labels.
template <class L, bool kSoftmax>
__global__ void CeGrad(float* ds, const float* dy, const float* lp, const L* labels, const float* w,
                       const double* weight_sum, CeLayout l, CeTargets tg, CeReduction red) {
  const int64_t total = l.n * l.c * l.inner;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t i = p % l.inner, c = (p / l.inner) % l.c, n = p / (l.c * l.inner);
    const int64_t k = n * l.inner + i;
    const int64_t t = mr::CeTarget(static_cast<int64_t>(labels[k]), tg.has_ignore, tg.ignore, l.c);
    double g = 0;
    if (t >= 0) {
      double scale = dy[0];
      if (red == kCeNone) scale = dy[k];
      if (red == kCeMean) scale = weight_sum[0] == 0 ? 0.0 : scale / weight_sum[0];
      g = (w ? w[t] : 1.0) * scale;
    } else if (t == mr::kBadLabel) {
      g = NAN;
    }
    if constexpr (kSoftmax) {
      ds[p] = mr::CeGradOut(lp[p], c == t, g);
    } else {
      ds[p] = static_cast<float>(g == 0 ? 0.0 : (c == t ? -g : 0.0 * g));  // NaN stays NaN
    }
  }
}

template <class L, bool kSoftmax>
Status CeBackward(const Node& node, std::span<const Tensor* const> in, std::span<Tensor* const> out,
                  const CudaKernelContext& ctx, const CeLayout& l, CeReduction red) {
  const CeTargets tg{node.HasAttr("ignore_index"), node.GetInt("ignore_index", 0)};
  const float* w = in.size() > 3 && in[3] ? in[3]->data<float>() : nullptr;
  const L* labels = in[2]->data<L>();
  double* weight_sum = reinterpret_cast<double*>(ctx.base.workspace.data());
  if (red == kCeMean) {
    CeWeightSum<L>
        <<<1, kRowThreads, 0, StreamOf(ctx)>>>(weight_sum, labels, w, l.n * l.inner, l.c, tg);
    FOUNDRY_CUDA_LAUNCHED(node, "CeWeightSum");
  }
  const int64_t total = l.n * l.c * l.inner;
  if (total == 0) return Status::Ok();
  CeGrad<L, kSoftmax><<<BlocksFor(total), cuda::kThreads, 0, StreamOf(ctx)>>>(
      out[0]->data<float>(), in[0]->data<float>(), in[1]->data<float>(), labels, w, weight_sum, l,
      tg, red);
  FOUNDRY_CUDA_LAUNCHED(node, "CeGrad");
  return Status::Ok();
}

// SoftmaxCrossEntropyLossGrad (dY, log_prob, label[, weight]) -> d_scores; kSoftmax false:
// foundry::NegativeLogLikelihoodLossGrad, -[c == t] * w[t] * g (log_prob gives only the shape).
template <bool kSoftmax>
Status SoftmaxCrossEntropyGradKernel(const Node& node, std::span<const Tensor* const> in,
                                     std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  const Tensor& LP = *in[1];
  if (LP.dtype() != DType::kFloat32) return UnsupportedType(node, LP.dtype());
  ASSIGN_OR_RETURN(CeLayout l, CeLayoutOf(node, LP, *in[2]));
  ASSIGN_OR_RETURN(CeReduction red, CeReductionOf(node));
  switch (in[2]->dtype()) {
    case DType::kInt64:
      return CeBackward<int64_t, kSoftmax>(node, in, out, ctx, l, red);
    case DType::kInt32:
      return CeBackward<int32_t, kSoftmax>(node, in, out, ctx, l, red);
    default:
      return UnsupportedType(node, in[2]->dtype());
  }
}

// The weight sum of "mean", one double.
int64_t CeGradWorkspace(const Node& node, std::span<const OperandType>,
                        std::span<const OperandType>) {
  return node.GetString("reduction", "mean") == "mean" ? static_cast<int64_t>(sizeof(double)) : 0;
}

}  // namespace

void RegisterCudaMathWorkspaces(CudaWorkspaceTable& table) {
  table.Add("", "MatMul", MatMulWorkspace);
  table.Add(kMs, "FusedMatMul", MatMulWorkspace);
  table.Add("", "Gemm", MatMulWorkspace);
  table.Add("", "SoftmaxCrossEntropyLoss", CeWorkspace);
  table.Add(kMs, "SoftmaxCrossEntropyLossGrad", CeGradWorkspace);
  table.Add("foundry", "NegativeLogLikelihoodLossGrad", CeGradWorkspace);
}

void RegisterCudaMathKernels(CudaKernelTable& table) {
  table.Add("", "MatMul", MatMulKernel);
  table.Add(kMs, "FusedMatMul", MatMulKernel);
  table.Add("", "Gemm", GemmKernel);

  table.Add("", "Softmax", SoftmaxKernel<false>);
  table.Add("", "LogSoftmax", SoftmaxKernel<true>);
  table.Add(kMs, "SoftmaxGrad_13", SoftmaxGradKernel<false>);
  table.Add(kMs, "LogSoftmaxGrad_13", SoftmaxGradKernel<true>);

  table.Add("", "ReduceSum", ReduceKernel<mr::kSum>);
  table.Add("", "ReduceMean", ReduceKernel<mr::kMean>);
  table.Add("", "ReduceMax", ReduceKernel<mr::kMax>);
  table.Add("", "ReduceMin", ReduceKernel<mr::kMin>);
  table.Add("", "ReduceProd", ReduceKernel<mr::kProd>);
  table.Add("", "ReduceL1", ReduceKernel<mr::kL1>);
  table.Add("", "ReduceL2", ReduceKernel<mr::kL2>);
  table.Add("", "ReduceSumSquare", ReduceKernel<mr::kSumSquare>);
  table.Add("", "ReduceLogSum", ReduceKernel<mr::kLogSum>);
  table.Add("", "ReduceLogSumExp", ReduceKernel<mr::kLogSumExp>);

  table.Add("", "CumSum", CumSumKernel);

  table.Add("", "LayerNormalization", LayerNormKernel);
  table.Add(kMs, "LayerNormalizationGrad", LayerNormGradKernel);
  table.Add(kMs, "SimplifiedLayerNormalization", SimplifiedLayerNormKernel);
  table.Add(kMs, "SimplifiedLayerNormalizationGrad", LayerNormGradKernel);

  table.Add("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyKernel);
  table.Add(kMs, "SoftmaxCrossEntropyLossGrad", SoftmaxCrossEntropyGradKernel<true>);
  table.Add("foundry", "NegativeLogLikelihoodLossGrad", SoftmaxCrossEntropyGradKernel<false>);
}

}  // namespace foundry
