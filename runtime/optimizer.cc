#include "runtime/optimizer.h"

#include <cmath>
#include <string>

#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

std::string_view OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kDecoupledAdamW:
      return "decoupled_adamw";
  }
  return "adamw";
}

StatusOr<OptimizerKind> ParseOptimizerName(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "decoupled_adamw") return OptimizerKind::kDecoupledAdamW;
  return Error("unknown optimizer '" + std::string(name) +
               "' (choose sgd, adamw or decoupled_adamw)");
}

Status CheckOptimizerOptions(const OptimizerOptions& o) {
  // Written so that NaN fails every check: each condition is what must hold.
  if (!(std::isfinite(o.lr) && o.lr > 0))
    return Error("--lr " + Num(o.lr) + ": the learning rate must be a finite number > 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    return Error("--beta1 " + Num(o.beta1) + ": must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    return Error("--beta2 " + Num(o.beta2) + ": must be in [0, 1)");
  if (!(std::isfinite(o.eps) && o.eps > 0))
    return Error("--eps " + Num(o.eps) + ": must be a finite number > 0");
  if (!(std::isfinite(o.weight_decay) && o.weight_decay >= 0))
    return Error("--weight-decay " + Num(o.weight_decay) + ": must be a finite number >= 0");
  if (!(o.momentum >= 0 && o.momentum < 1))
    return Error("--momentum " + Num(o.momentum) + ": must be in [0, 1)");
  return Status::Ok();
}

}  // namespace foundry
