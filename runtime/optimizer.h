// The optimizers foundry-run applies after each step, as the user names and sets them: option
// names, parsing and range checks. The updates themselves (AdamW, SGD, bitwise PyTorch's) are
// kernels: kernels/cpu/optimizer.h on the CPU, its CUDA twin (reached through the CUDA backend)
// on the device.
#pragma once

#include <string_view>

#include "base/status.h"
#include "kernels/cpu/optimizer.h"

namespace foundry {

std::string_view OptimizerName(OptimizerKind kind);  // "sgd", "adamw", "decoupled_adamw"
StatusOr<OptimizerKind> ParseOptimizerName(std::string_view name);

// Each value in range, or an error naming the option as foundry-run spells it ("--lr nan: ..."):
// lr finite > 0, 0 <= beta1, beta2 < 1, eps finite > 0, weight_decay finite >= 0,
// 0 <= momentum < 1.
Status CheckOptimizerOptions(const OptimizerOptions& o);

}  // namespace foundry
