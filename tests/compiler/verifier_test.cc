#include "compiler/verifier.h"

#include <gtest/gtest.h>

#include "compiler/text.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

Status VerifyText(const char* text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return VerifyGraph(*g);
}

TEST(VerifierTest, AcceptsAWellFormedGraph) {
  EXPECT_TRUE(VerifyText(R"(graph g {
  input x : f32[2,3]
  y : f32[2,3] = Tanh(x)
  output y
})").ok());
}

TEST(VerifierTest, RejectsUseBeforeDefinition) {
  EXPECT_EQ(VerifyText(R"(graph g {
  input x : f32[2]
  y = Tanh(z) #"first"
  z = Tanh(x) #"second"
  output y
})").message(),
            "verifier: Tanh node 'first' uses 'z' before it is defined (not topologically ordered)");
}

TEST(VerifierTest, RejectsTwoProducers) {
  EXPECT_EQ(VerifyText(R"(graph g {
  input x : f32[2]
  y = Tanh(x) #"a"
  y = Tanh(x) #"b"
  output y
})").message(),
            "verifier: value 'y' is defined twice (again by Tanh node 'b')");
}

TEST(VerifierTest, RejectsRecordedShapeThatDisagreesWithTheOp) {
  EXPECT_EQ(VerifyText(R"(graph g {
  input x : f32[2,3]
  y : f32[3,2] = Tanh(x) #"t"
  output y
})").message(),
            "verifier: Tanh node 't' output 'y' is recorded as [3,2] but the op gives [2,3]");
}

TEST(VerifierTest, RejectsMissingGraphOutput) {
  EXPECT_EQ(VerifyText(R"(graph g {
  input x : f32[2]
  output nowhere
})").message(),
            "verifier: graph output 'nowhere' is never produced");
}

}  // namespace
}  // namespace foundry
