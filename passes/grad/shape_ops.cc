#include "passes/grad/grad_rule.h"

namespace foundry {

void RegisterShapeOpGradRules(GradRuleTable& table) {}

}  // namespace foundry
