#include "compiler/op_schema.h"

namespace foundry {

void RegisterMathSchemas(OpSchemaTable& table) {}

}  // namespace foundry
