// The "not supported" error quotes the op and domain as the file wrote them; control characters
// in them must not split the one-line error (found by the import + compile fuzzer).
#include <gtest/gtest.h>

#include "compiler/op_schema.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(UnsupportedOpMessageTest, ControlCharactersAreEscaped) {
  Graph g;
  Node n;
  n.name = "n";
  n.op_type = "Act\n\x01";
  n.domain = "toy\tlayers";
  n.outputs = {"y"};
  auto r = InferNodeTypes(g, n);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.substr(m.find(": operator ")),
            ": operator Act\\x0a\\x01 (domain toy\\x09layers) is not supported by foundry; "
            "supported ops are listed by `foundry-compile --list-ops`");
}

TEST(UnsupportedOpMessageTest, PlainNamesAreUnchanged) {
  Graph g;
  Node n;
  n.name = "n";
  n.op_type = "Celu";
  n.outputs = {"y"};
  auto r = InferNodeTypes(g, n);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "Celu node 'n': operator Celu is not supported by foundry; supported ops are listed by "
            "`foundry-compile --list-ops`");
}

// A required input written as "" (omitted) is an error, not a null dereference in the op's
// inference (fuzzer finding: MatMul with an empty first input).
TEST(UnsupportedOpMessageTest, EmptyRequiredInputIsAnError) {
  Graph g;
  g.GetOrAddValue("b");
  Node n;
  n.name = "mm";
  n.op_type = "MatMul";
  n.inputs = {"", "b"};
  n.outputs = {"y"};
  auto r = InferNodeTypes(g, n);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "MatMul node 'mm': input 0 is required but the node leaves it empty");
}

}  // namespace
}  // namespace foundry
