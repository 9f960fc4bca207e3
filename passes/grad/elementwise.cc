#include "passes/grad/grad_rule.h"

namespace foundry {

void RegisterElementwiseGradRules(GradRuleTable& table) {}

}  // namespace foundry
