#include "compiler/op_table.h"

#include <gtest/gtest.h>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "passes/grad/grad_rule.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(OpTableTest, FindsByCanonicalDomainAndKeepsTheFirstOfTwoRegistrations) {
  OpTable<int> t;
  t.Add("", "Relu", 1);
  t.Add("com.microsoft", "Relu", 2);
  t.Add("ai.onnx", "Relu", 3);  // same op as ("", "Relu")
  ASSERT_NE(t.Find("", "Relu"), nullptr);
  EXPECT_EQ(*t.Find("", "Relu"), 1);
  EXPECT_EQ(*t.Find("ai.onnx", "Relu"), 1);
  EXPECT_EQ(*t.Find("com.microsoft", "Relu"), 2);
  EXPECT_EQ(t.Find("", "Gelu"), nullptr);
  EXPECT_EQ(t.Find("com", "microsoft\nRelu"), nullptr);
  EXPECT_EQ(t.rows().size(), 2u);
  EXPECT_EQ(t.duplicates(), std::vector<std::string>{"Relu"});
}

TEST(OpTableTest, NoTableRegistersAnOpTwice) {
  EXPECT_TRUE(OpSchemas().duplicates().empty()) << OpSchemas().duplicates().front();
  EXPECT_TRUE(CpuKernels().duplicates().empty()) << CpuKernels().duplicates().front();
  EXPECT_TRUE(GradRules().duplicates().empty()) << GradRules().duplicates().front();
}

TEST(OpTableTest, EveryKernelAndGradRuleHasASchema) {
  for (const auto& row : CpuKernels().rows())
    EXPECT_NE(OpSchemas().Find(row.domain, row.op_type), nullptr) << row.op_type;
  for (const auto& row : GradRules().rows())
    EXPECT_NE(OpSchemas().Find(row.domain, row.op_type), nullptr) << row.op_type;
}

}  // namespace
}  // namespace foundry
