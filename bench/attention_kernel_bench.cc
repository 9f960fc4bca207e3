// The fused attention kernel alone on the CPU (kernels/cpu/attention.cc), at MPT-125M's attention
// shape: q, k, v [1, 12, S, 64] fp32, ALiBi bias [1, 12, 1, S], causal, scale 1/8 — what
// foundry::Attention does inside an MPT-125M step. Prints one JSON line:
//   {"seq":S,"threads":T,"fwd_ms":..,"fwd_bwd_ms":..}
// with the median of --reps runs after one warm-up (fwd_bwd: the forward then the backward).
// Usage: attention_kernel_bench [--seq 1024] [--threads 1] [--heads 12] [--head-dim 64] [--reps 5]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/kernel.h"

namespace foundry {
namespace {

Tensor Random(Shape shape, uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int64_t seq = 1024, heads = 12, dim = 64, threads = 1, reps = 5, window = 0;
  double softcap = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t value = std::atoll(argv[i + 1]);
    if (flag == "--seq") seq = value;
    else if (flag == "--window")
      window = value;
    else if (flag == "--softcap")
      softcap = std::atof(argv[i + 1]);
    else if (flag == "--threads") threads = value;
    else if (flag == "--heads") heads = value;
    else if (flag == "--head-dim") dim = value;
    else if (flag == "--reps") reps = value;
    else {
      std::cerr << "attention_kernel_bench: error: unknown option " << flag << "\n";
      return 2;
    }
  }
  if (seq < 1 || heads < 1 || dim < 1 || threads < 1 || reps < 1 || window < 0 || softcap < 0) {
    std::cerr << "attention_kernel_bench: error: every value must be >= 1 (--window and "
                 "--softcap >= 0)\n";
    return 2;
  }
  SetCpuThreads(static_cast<int>(threads));
  Tensor q = Random({1, heads, seq, dim}, 1), k = Random({1, heads, dim, seq}, 2),
         v = Random({1, heads, seq, dim}, 3), bias(DType::kFloat32, {1, heads, 1, seq});
  for (int64_t h = 0; h < heads; ++h)  // ALiBi: slope 2^(-8(h+1)/H) times the key position
    for (int64_t j = 0; j < seq; ++j)
      bias.data<float>()[h * seq + j] =
          static_cast<float>(std::exp2(-8.0 * (h + 1) / heads) * static_cast<double>(j + 1 - seq));
  Tensor o(DType::kFloat32, {1, heads, seq, dim}), lse(DType::kFloat32, {1, heads, seq});
  Tensor dout = Random({1, heads, seq, dim}, 4);
  Tensor dq(DType::kFloat32, q.shape()), dk(DType::kFloat32, k.shape()),
      dv(DType::kFloat32, v.shape());

  Node fwd;
  fwd.op_type = "Attention";
  fwd.domain = "foundry";
  fwd.name = "bench";
  fwd.attrs["scale"] = Attribute::Float(static_cast<float>(1.0 / std::sqrt(double(dim))));
  fwd.attrs["causal"] = Attribute::Int(1);
  // What the fusion writes for MPT's causal mask (its finfo.min fill becomes -inf: no row can be
  // masked everywhere), so the kernel skips the tiles above the diagonal as in a fused step.
  fwd.attrs["mask_value"] = Attribute::Float(-std::numeric_limits<float>::infinity());
  if (window > 0) fwd.attrs["window"] = Attribute::Int(window);
  if (softcap > 0) fwd.attrs["softcap"] = Attribute::Float(static_cast<float>(softcap));
  fwd.inputs = {"q", "k", "v", "bias"};
  fwd.outputs = {"o", "lse"};
  Node bwd = fwd;
  bwd.op_type = "AttentionGrad";
  bwd.inputs = {"dout", "q", "k", "v", "o", "lse", "bias"};
  bwd.outputs = {"dq", "dk", "dv"};

  const Tensor* fin[] = {&q, &k, &v, &bias};
  Tensor* fout[] = {&o, &lse};
  const Tensor* bin[] = {&dout, &q, &k, &v, &o, &lse, &bias};
  Tensor* bout[] = {&dq, &dk, &dv};
  const int64_t ws = std::max(CpuWorkspaceBytesFor(fwd, fin, fout), CpuWorkspaceBytesFor(bwd, bin, bout));
  std::vector<std::byte> workspace(static_cast<size_t>(ws) + 256);
  KernelContext ctx;
  void* p = workspace.data();
  size_t space = workspace.size();
  ctx.workspace = {static_cast<std::byte*>(std::align(256, ws, p, space)), static_cast<size_t>(ws)};

  auto run = [&](bool backward) {
    Status st = RunCpuKernel(fwd, fin, fout, ctx);
    if (st.ok() && backward) st = RunCpuKernel(bwd, bin, bout, ctx);
    if (!st.ok()) {
      std::cerr << "attention_kernel_bench: error: " << st.message() << "\n";
      std::exit(1);
    }
  };
  auto time = [&](bool backward) {
    run(backward);  // warm-up
    std::vector<double> ms;
    for (int64_t r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      run(backward);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count());
    }
    return Median(ms);
  };
  const double f = time(false), fb = time(true);
  std::cout << "{\"seq\":" << seq << ",\"threads\":" << threads << ",\"window\":" << window
            << ",\"softcap\":" << softcap << ",\"fwd_ms\":" << f << ",\"fwd_bwd_ms\":" << fb
            << "}\n";
  return 0;
}

}  // namespace
}  // namespace foundry

int main(int argc, char** argv) { return foundry::Main(argc, argv); }
