#include "base/memory_class.h"

namespace foundry {

std::string_view MemoryClassName(MemoryClass c) {
  switch (c) {
    case MemoryClass::kArena:
      return "arena";
    case MemoryClass::kParameter:
      return "parameter";
    case MemoryClass::kGradient:
      return "gradient";
    case MemoryClass::kOptimizerState:
      return "optimizer_state";
    case MemoryClass::kInput:
      return "input";
    case MemoryClass::kConstant:
      return "constant";
    case MemoryClass::kOutput:
      return "output";
    case MemoryClass::kOther:
      return "other";
  }
  return "other";
}

}  // namespace foundry
