// The accounting allocator (base/memory_accounting.h) and Tensor's storage on it: the live bytes
// always equal the bytes of the live owning tensors (views own nothing), per class and in total,
// through allocation, copies, moves, re-classing and frees; the high-water marks follow the live
// bytes and ResetMemoryPeaks brings them back down.
#include "base/memory_accounting.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "base/tensor.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Live bytes and peaks relative to a baseline taken at construction (other tests, gtest itself
// and static tensors may hold storage of their own).
struct Delta {
  MemorySnapshot base = MemoryUsage();
  int64_t live(MemoryClass c) const { return MemoryUsage()[c].live - base[c].live; }
  int64_t total() const { return MemoryUsage().total.live - base.total.live; }
};

TEST(MemoryAccountingTest, LiveBytesAreTheOwningTensorsBytes) {
  ResetMemoryPeaks();
  Delta d;
  {
    Tensor a(DType::kFloat32, {3, 5});  // 60 bytes, class other
    EXPECT_EQ(a.owned_bytes(), 60);
    EXPECT_EQ(a.memory_class(), MemoryClass::kOther);
    EXPECT_EQ(d.live(MemoryClass::kOther), 60);
    EXPECT_EQ(d.total(), 60);

    Tensor b = a;  // a copy owns bytes of its own
    EXPECT_NE(b.raw(), a.raw());
    EXPECT_EQ(d.total(), 120);

    Tensor c = std::move(b);  // a move hands the bytes over: nothing new
    EXPECT_EQ(d.total(), 120);
    EXPECT_EQ(b.raw(), nullptr);  // NOLINT: checking the moved-from state on purpose

    {
      ScopedMemoryClass scope(MemoryClass::kGradient);
      Tensor g(DType::kInt64, {7});  // 56 bytes
      EXPECT_EQ(g.memory_class(), MemoryClass::kGradient);
      EXPECT_EQ(d.live(MemoryClass::kGradient), 56);
      EXPECT_EQ(d.total(), 176);
      {
        ScopedMemoryClass inner(MemoryClass::kInput);
        EXPECT_EQ(CurrentMemoryClass(), MemoryClass::kInput);
      }
      EXPECT_EQ(CurrentMemoryClass(), MemoryClass::kGradient);
    }
    EXPECT_EQ(CurrentMemoryClass(), MemoryClass::kOther);
    EXPECT_EQ(d.live(MemoryClass::kGradient), 0);
    EXPECT_EQ(d.total(), 120);

    c.SetMemoryClass(MemoryClass::kParameter);  // re-classed: the total does not move
    EXPECT_EQ(d.live(MemoryClass::kParameter), 60);
    EXPECT_EQ(d.live(MemoryClass::kOther), 60);
    EXPECT_EQ(d.total(), 120);

    a = c;  // copy-assignment frees a's old bytes and owns new ones (class of the copier: other)
    EXPECT_EQ(a.memory_class(), MemoryClass::kOther);
    EXPECT_EQ(d.total(), 120);
    a = std::move(c);  // frees a's bytes, takes c's (class parameter)
    EXPECT_EQ(a.memory_class(), MemoryClass::kParameter);
    EXPECT_EQ(d.live(MemoryClass::kParameter), 60);
    EXPECT_EQ(d.live(MemoryClass::kOther), 0);
    EXPECT_EQ(d.total(), 60);
    EXPECT_EQ(MemoryUsage().total.peak - d.base.total.live, 180);  // a, b and the 56-byte g
  }
  EXPECT_EQ(d.total(), 0);
  EXPECT_EQ(d.live(MemoryClass::kParameter), 0);
  ResetMemoryPeaks();
  EXPECT_EQ(MemoryUsage().total.peak, MemoryUsage().total.live);
}

TEST(MemoryAccountingTest, ViewsOwnNothingAndCopyingAViewOwns) {
  Tensor base = Tensor::FromVector<float>(DType::kFloat32, {4}, {1, 2, 3, 4});
  Delta d;
  Tensor v = Tensor::View(DType::kFloat32, {2, 2}, base.raw());
  EXPECT_TRUE(v.is_view());
  EXPECT_FALSE(base.is_view());
  EXPECT_EQ(v.owned_bytes(), 0);
  EXPECT_EQ(d.total(), 0);
  v.data<float>()[3] = 9;  // writes through to the owner
  EXPECT_EQ(base.data<float>()[3], 9);
  v.SetMemoryClass(MemoryClass::kArena);  // nothing to re-class
  EXPECT_EQ(d.live(MemoryClass::kArena), 0);

  Tensor moved = std::move(v);  // still a view of the same bytes
  EXPECT_TRUE(moved.is_view());
  EXPECT_EQ(moved.raw(), base.raw());
  EXPECT_EQ(d.total(), 0);

  Tensor copy = moved;  // an owning copy
  EXPECT_FALSE(copy.is_view());
  EXPECT_NE(copy.raw(), base.raw());
  EXPECT_EQ(copy.shape(), (Shape{2, 2}));
  EXPECT_EQ(copy.data<float>()[3], 9);
  EXPECT_EQ(d.total(), 16);
  copy = moved;  // copy-assigning a view: still owning
  EXPECT_FALSE(copy.is_view());
  EXPECT_EQ(d.total(), 16);
}

TEST(MemoryAccountingTest, RawAllocationsAndPeaks) {
  ResetMemoryPeaks();
  Delta d;
  void* p = AllocateAccounted(1000, 256, MemoryClass::kArena);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(static_cast<unsigned char*>(p)[999], 0);  // zero-filled
  void* q = AllocateAccounted(0, 256, MemoryClass::kArena);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(p, q);
  EXPECT_EQ(d.live(MemoryClass::kArena), 1000);
  FreeAccounted(p, 1000, MemoryClass::kArena);
  FreeAccounted(q, 0, MemoryClass::kArena);
  EXPECT_EQ(d.live(MemoryClass::kArena), 0);
  EXPECT_EQ(MemoryUsage()[MemoryClass::kArena].peak - d.base[MemoryClass::kArena].live, 1000);
  ResetMemoryPeaks();
  EXPECT_EQ(MemoryUsage()[MemoryClass::kArena].peak, MemoryUsage()[MemoryClass::kArena].live);
}

TEST(MemoryAccountingTest, CountersAreThreadSafe) {
  Delta d;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      ScopedMemoryClass scope(t % 2 ? MemoryClass::kInput : MemoryClass::kOutput);
      for (int i = 0; i < 2000; ++i) {
        Tensor a(DType::kFloat32, {i % 17 + 1});
        Tensor b = a;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(d.total(), 0);
  EXPECT_EQ(d.live(MemoryClass::kInput), 0);
  EXPECT_EQ(d.live(MemoryClass::kOutput), 0);
}

TEST(MemoryAccountingTest, ClassNames) {
  EXPECT_EQ(MemoryClassName(MemoryClass::kArena), "arena");
  EXPECT_EQ(MemoryClassName(MemoryClass::kOptimizerState), "optimizer_state");
  EXPECT_EQ(MemoryClassName(MemoryClass::kOther), "other");
}

}  // namespace
}  // namespace foundry
