#include "tests/support/cuda_check.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/device.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {

bool GpuRequired() {
  const char* v = std::getenv("FOUNDRY_REQUIRE_GPU");
  return v && std::strcmp(v, "1") == 0;
}

bool HaveGpu(std::string* why) {
#ifndef FOUNDRY_HAVE_CUDA
  *why = "the CUDA backend is not built (no nvcc at configure time)";
  return false;
#else
  if (CudaDeviceCount() == 0) {
    *why = "no CUDA device: " + CudaDeviceDescription(0);
    return false;
  }
  return true;
#endif
}

StatusOr<std::vector<Tensor>> RunSingleNodeOnCuda(const Node& node,
                                                  const std::map<std::string, Tensor>& inputs,
                                                  const std::map<std::string, Tensor>& constants,
                                                  const std::vector<Tensor>& like, bool tf32) {
#ifndef FOUNDRY_HAVE_CUDA
  return Error("the CUDA backend is not built");
#else
  // Device buffers, freed on every path.
  struct Buffers {
    std::vector<void*> ptrs;
    ~Buffers() {
      for (void* p : ptrs) cuda::DeviceFree(p);
    }
    void* stream = nullptr;
    StatusOr<void*> Get(int64_t bytes, const std::string& what) {
      void* p = nullptr;
      RETURN_IF_ERROR(cuda::DeviceAlloc(bytes > 0 ? bytes : 1, &p, stream, what));
      ptrs.push_back(p);
      return p;
    }
  } buffers;
  ASSIGN_OR_RETURN(cuda::StreamAndBlas sb, cuda::CreateStreamAndBlas());
  struct Guard {
    cuda::StreamAndBlas* s;
    ~Guard() { cuda::DestroyStreamAndBlas(*s); }
  } guard{&sb};
  buffers.stream = sb.stream;

  std::vector<Tensor> dev_in(node.inputs.size());
  std::vector<const Tensor*> in_ptrs(node.inputs.size(), nullptr);
  std::vector<const Tensor*> host_constants(node.inputs.size(), nullptr);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const std::string& name = node.inputs[i];
    if (name.empty()) continue;
    const Tensor* host = nullptr;
    if (auto it = inputs.find(name); it != inputs.end()) host = &it->second;
    if (auto it = constants.find(name); it != constants.end()) {
      host = &it->second;
      host_constants[i] = host;
    }
    if (!host) return Error("RunSingleNodeOnCuda: no tensor for input '" + name + "'");
    ASSIGN_OR_RETURN(void* p, buffers.Get(host->nbytes(), "input " + name));
    RETURN_IF_ERROR(cuda::CopyToDevice(p, host->raw(), host->nbytes(), sb.stream, "input " + name));
    dev_in[i] = Tensor::View(host->dtype(), host->shape(), p);
    in_ptrs[i] = &dev_in[i];
  }
  std::vector<Tensor> dev_out(node.outputs.size());
  std::vector<Tensor*> out_ptrs(node.outputs.size(), nullptr);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i].empty() || i >= like.size()) continue;
    ASSIGN_OR_RETURN(void* p, buffers.Get(like[i].nbytes(), "output " + node.outputs[i]));
    // Poison, as the CPU tests do: an element the kernel leaves unwritten shows up.
    RETURN_IF_ERROR(cuda::DeviceMemset(p, 0xFF, like[i].nbytes(), sb.stream, "poison"));
    dev_out[i] = Tensor::View(like[i].dtype(), like[i].shape(), p);
    out_ptrs[i] = &dev_out[i];
  }
  const int64_t ws = CudaWorkspaceBytesFor(node, in_ptrs, out_ptrs);
  ASSIGN_OR_RETURN(void* wsp, buffers.Get(ws, "workspace"));
  CudaKernelContext ctx;
  ctx.base.seed = 0;
  ctx.base.node_key = NodeKey(node);
  ctx.base.training = true;
  ctx.base.workspace = std::span<std::byte>(static_cast<std::byte*>(wsp), static_cast<size_t>(ws));
  ctx.base.constant_inputs = host_constants;
  ctx.stream = sb.stream;
  ctx.cublas = sb.cublas;
  ctx.tf32 = tf32;
  RETURN_IF_ERROR(RunCudaKernel(node, in_ptrs, out_ptrs, ctx));
  RETURN_IF_ERROR(cuda::Synchronize(sb.stream, node.Describe()));
  std::vector<Tensor> result;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (!out_ptrs[i]) {
      result.emplace_back();
      continue;
    }
    Tensor host(like[i].dtype(), like[i].shape());
    RETURN_IF_ERROR(cuda::CopyToHost(host.raw(), dev_out[i].raw(), host.nbytes(), sb.stream,
                                     "output " + node.outputs[i]));
    result.push_back(std::move(host));
  }
  return result;
#endif
}

Status CompareCudaWithCpu(const Node& node, const std::map<std::string, Tensor>& inputs,
                          const std::map<std::string, Tensor>& constants, double atol,
                          double rtol) {
  ASSIGN_OR_RETURN(std::vector<Tensor> cpu, RunSingleNode(node, inputs, constants));
  ASSIGN_OR_RETURN(std::vector<Tensor> gpu, RunSingleNodeOnCuda(node, inputs, constants, cpu));
  for (size_t o = 0; o < cpu.size(); ++o) {
    if (node.outputs[o].empty()) continue;
    const Tensor& a = cpu[o];
    const Tensor& b = gpu[o];
    if (a.shape() != b.shape() || a.dtype() != b.dtype())
      return Error("output " + node.outputs[o] + ": type differs");
    const bool is_float = a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64;
    for (int64_t i = 0; i < a.numel(); ++i) {
      double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
      // x == y first: two equal infinities differ by NaN, which no tolerance accepts.
      bool ok = x == y ||
                (is_float &&
                 (std::isnan(x) ? std::isnan(y) : std::fabs(x - y) <= atol + rtol * std::fabs(x)));
      if (!ok)
        return Error(node.op_type + " output " + node.outputs[o] + " element " + std::to_string(i) +
                     " of " + std::to_string(a.numel()) + ": cpu " + std::to_string(x) + ", cuda " +
                     std::to_string(y));
    }
  }
  return Status::Ok();
}

}  // namespace foundry
