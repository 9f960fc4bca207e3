#include "compiler/op_schema.h"

namespace foundry {

void RegisterShapeOpSchemas(OpSchemaTable& table) {}

}  // namespace foundry
