// Mixed precision as llm-foundry trains (`precision: amp_bf16`): the forward graph
// rewritten the way torch.autocast(device_type="cuda", dtype=torch.bfloat16) runs the model that
// was exported, before autodiff, so the backward pass, the checkpointing pass and the memory plan
// all see bf16 where autocast computes in bf16.
//
// The op lists follow PyTorch's CUDA autocast lists (aten/src/ATen/autocast_mode.h,
// AT_FORALL_LOWER_PRECISION_FP / AT_FORALL_FP32 / AT_FORALL_FP32_SET_OPT_DTYPE), in ONNX terms:
//   bf16 (every f32 floating input cast to bf16): MatMul, Gemm, com.microsoft::FusedMatMul,
//        foundry::Attention (scaled_dot_product_attention), Conv, ConvTranspose, Einsum, PRelu;
//        and a linear layer's bias: an Add of such a product's output and a rank-1 initializer
//        (the exporter writes torch's linear as product + Add, autocast runs linear with its bias
//        in bf16).
//   fp32 (every bf16 input cast to f32): Softmax, LogSoftmax, LayerNormalization,
//        com.microsoft::SimplifiedLayerNormalization (RMS norm: pow, mean, rsqrt in torch, pow and
//        rsqrt on the fp32 list), GroupNormalization, Exp, Log, Pow, Reciprocal, Softplus, Acos,
//        Asin, Cosh, Sinh, Tan, ReduceSum, ReduceProd, ReduceLogSumExp, ReduceL1, ReduceL2, CumSum,
//        SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss.
//   everything else runs in the widest floating type of its inputs, as torch's type promotion
//        does: a zero-dimensional input (a Python scalar in the model, `x * 0.5`) does not widen a
//        bf16 tensor; a rank >= 1 f32 input does (the residual stream stays f32, as in torch).
// CPU autocast's lists differ (softmax, layer_norm, exp, sum... are not on its fp32 list); foundry
// follows the CUDA lists on every backend, as the issue asks.
//
// Casts: one Cast per (value, type), shared by every consumer, so each parameter is cast once per
// step (autocast's weight cache); constants are converted at compile time instead (no node).
// f64 values are never touched. The graph's outputs keep their types (a Cast back where a value
// became bf16). Parameters, their gradients and the optimizer state stay f32: a parameter's
// gradient arrives through its Cast's gradient, a Cast back to f32.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "passes/pass.h"

namespace foundry {

enum class Precision { kFp32, kAmpBf16 };
// "fp32", "amp_bf16" (llm-foundry's `precision:` values).
std::string_view PrecisionName(Precision p);
// Parses a `--precision` / `precision:` value; an error names what is accepted (amp_fp16 is
// refused: fp16 needs loss scaling, which foundry does not have).
StatusOr<Precision> ParsePrecision(std::string_view name);

struct AutocastStats {
  int low = 0;               // nodes run in bf16 (lower-precision list, linear biases)
  int fp32 = 0;              // nodes on the fp32 list that had a bf16 input
  int promoted = 0;          // other nodes whose inputs were cast to their widest type
  int parameter_casts = 0;   // Cast nodes of parameters (one per parameter used in bf16)
  int activation_casts = 0;  // Cast nodes of computed values
  int constants = 0;         // constants converted at compile time
  int low_params = 0;        // parameters read as bf16 everywhere (FSDP param_dtype bf16)
  std::string ToString() const;
};

class AutocastPass : public Pass {
 public:
  struct Options {
    Precision precision = Precision::kFp32;
    // FSDP mixed precision (compiler/sharding.h): a bf16 param_dtype makes every forward read of a
    // trainable parameter a read of its one bf16 Cast (FSDP casts the gathered parameters), so the
    // forward computes on bf16 weights and its activations follow; the norms then run in their
    // input's type (llm-foundry's low_precision_layernorm, HF's RMSNorm cast back) with f32
    // statistics. A bf16 buffer_dtype converts the float constants of rank >= 1 that ops outside
    // both lists read (FSDP casts the buffers). f32 for both: torch.autocast alone.
    DType param_dtype = DType::kFloat32;
    DType buffer_dtype = DType::kFloat32;
  };
  AutocastPass() = default;
  explicit AutocastPass(Options options) : options_(options) {}

  std::string_view name() const override { return "autocast"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const AutocastStats& stats() const { return stats_; }

 private:
  Options options_;
  AutocastStats stats_;
};

// After autodiff (and remat): the backward reads a bf16 copy of each parameter it needs (the
// input gradient of a product, dX = dY·Wᵀ) from a Cast of its own, marked recompute, which the
// schedule places just before its first backward reader. The forward's copy then dies after the
// forward's last use instead of being held through the backward: a Cast per weight (no FLOPs,
// one read of the f32 weight) instead of keeping every bf16 weight copy for the step (for
// MPT-125M 250 MB). Same bits: the copy is the same Cast of the same weight.
//
// With `save_forward_copies` (foundry-compile --autocast-weight-copies saved) the backward reads
// the forward's copy instead, as a PyTorch run holds it: torch.autocast casts each f32 weight once
// per forward (its cache) and autograd saves that copy for the product's backward. Only a weight
// read inside a checkpointed region (a recompute clone reads its copy) gets its Cast of its own,
// as above: torch.utils.checkpoint runs autocast again when it recomputes the region.
class AutocastRecastPass : public Pass {
 public:
  struct Options {
    bool save_forward_copies = false;
  };
  AutocastRecastPass() = default;
  explicit AutocastRecastPass(Options options) : options_(options) {}

  std::string_view name() const override { return "autocast-recast"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override {
    return std::to_string(recast_) + " parameter casts repeated for the " +
           (options_.save_forward_copies
                ? "recompute (the backward reads the forward's copies, as torch.autocast's cache)"
                : "backward");
  }
  int recast() const { return recast_; }

 private:
  Options options_;
  int recast_ = 0;
};

}  // namespace foundry
