// Finite-difference check of one op's gradient rule, without the autodiff pass: builds a one-node
// graph, asks the op's rule for its backward nodes through a GradBuilder, runs both on the CPU
// reference kernels, and compares the analytic gradient of L = sum_i <dY_i, Y_i> (random dY) with
// central differences of L.
//
// Tolerance derivation (fp32 kernels, L accumulated in double): central differences have
// truncation error eps^2 * |f'''| / 6 (~1e-5 relative for eps = 1e-2 on O(1) smooth functions) and
// rounding error ~ u * |L| / eps where u = 6e-8 is fp32's unit roundoff of each Y element: with
// |L| <= 1e2 that is ~6e-4. Hence atol 2e-3 + rtol 1e-2 by default; ops with kinks (Relu, Clip,
// Where on ties) are checked away from the kinks by the caller's choice of inputs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"

namespace foundry {

struct GradCheckOptions {
  double eps = 1e-2;
  double rtol = 1e-2;
  double atol = 2e-3;
  uint64_t seed = 1;
  // At most this many elements per input are perturbed, evenly spread over the tensor (each
  // costs two forward runs); the elements in between are not checked for that shape.
  int max_elements = 200;
  // Inputs to differentiate with respect to; empty = every float input in `inputs`.
  std::vector<std::string> wrt;
  // Outputs that get no incoming gradient, as when only the backward reads them (saved statistics
  // such as LayerNormalization's Mean/InvStdDev); every other float output gets a random one.
  std::vector<std::string> no_grad_outputs;
};

// Seeded uniform [lo, hi) tensor.
Tensor RandomTensor(Shape shape, uint64_t seed, float lo = -1.f, float hi = 1.f);

// |analytic - numeric| / (atol + rtol * |numeric|): above 1 is a mismatch. +inf when either is
// NaN or Inf, so a non-finite gradient always fails (`err > allowed` alone is false for NaN).
double GradientErrorRatio(double analytic, double numeric, const GradCheckOptions& options);

// `inputs` are run-time inputs (float ones are differentiated); `constants` become initializers
// with data (shape operands, axes, indices that shape inference must see). Returns OK or an error
// describing the worst mismatch.
Status CheckGradients(const Node& node, const std::map<std::string, Tensor>& inputs,
                      const std::map<std::string, Tensor>& constants = {},
                      const GradCheckOptions& options = {});

// Runs a single node forward on the CPU kernels (types inferred from the given tensors).
StatusOr<std::vector<Tensor>> RunSingleNode(const Node& node,
                                            const std::map<std::string, Tensor>& inputs,
                                            const std::map<std::string, Tensor>& constants = {});

}  // namespace foundry
