#include "compiler/op_schema.h"

namespace foundry {

void RegisterElementwiseSchemas(OpSchemaTable& table) {}

}  // namespace foundry
