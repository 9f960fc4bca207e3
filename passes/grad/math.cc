#include "passes/grad/grad_rule.h"

namespace foundry {

void RegisterMathGradRules(GradRuleTable& table) {}

}  // namespace foundry
