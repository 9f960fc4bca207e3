// ParameterStore (runtime/parameter_store.h): the trained tensors on the host and in the backend's
// memory. On the CPU the two are the same tensors and nothing is copied; on a backend whose memory
// is not the host's (here a stand-in for a GPU: separate host blocks that only its copies reach,
// counted per class as the CUDA backend counts) the store allocates a copy of every parameter and
// slot, pushes the host values, and pulls them back only after a step marked them stale.
#include "runtime/parameter_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "runtime/cpu_backend.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

class SeparateMemoryBackend final : public Backend {
 public:
  std::string_view name() const override { return "separate"; }
  bool host_memory() const override { return false; }
  int64_t WorkspaceBytes(const Graph&, const Node&) const override { return 0; }
  Status Run(const Node& node, std::span<const Tensor* const>, std::span<Tensor* const>,
             std::span<std::byte>, const KernelContext&) override {
    return Error("the stand-in runs no node ('" + node.name + "')");
  }
  Status CopyIn(const Tensor& host, Tensor& device) override {
    ++copies_in;
    return GetCpuBackend().Copy(host, device);
  }
  Status CopyOut(const Tensor& device, Tensor& host) override {
    ++copies_out;
    return GetCpuBackend().Copy(device, host);
  }
  Status Copy(const Tensor& from, Tensor& to) override { return GetCpuBackend().Copy(from, to); }
  Status Zero(Tensor& device) override { return GetCpuBackend().Zero(device); }
  StatusOr<StepCheck> CheckStep(const Tensor&, std::span<const Tensor* const>, Region&) override {
    return Error("not used here");
  }
  StatusOr<std::optional<size_t>> ApplyOptimizer(const OptimizerOptions&, int64_t,
                                                 std::span<const ParameterUpdate>,
                                                 Region&) override {
    return Error("not used here");
  }
  MemorySnapshot Bytes() const override { return bytes_; }
  void ResetPeaks() override {}

  int copies_in = 0, copies_out = 0;

 protected:
  StatusOr<std::byte*> AllocateBytes(int64_t bytes, MemoryClass c) override {
    void* p = std::aligned_alloc(kArenaAlignment, RoundUp(bytes));
    if (!p) return Error("out of memory");
    std::memset(p, 0, RoundUp(bytes));
    bytes_.by_class[c].live += bytes;
    return static_cast<std::byte*>(p);
  }
  void FreeBytes(std::byte* p, int64_t bytes, MemoryClass c) override {
    std::free(p);
    bytes_.by_class[c].live -= bytes;
  }

 private:
  static size_t RoundUp(int64_t bytes) {
    const auto a = static_cast<size_t>(kArenaAlignment);
    return (static_cast<size_t>(bytes > 0 ? bytes : 1) + a - 1) / a * a;
  }
  MemorySnapshot bytes_;
};

std::map<std::string, Tensor> TwoParameters() {
  std::map<std::string, Tensor> p;
  p["w"] = Tensor::FromVector<float>(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  p["b"] = Tensor::FromVector<float>(DType::kFloat32, {3}, {-1, 0, 1});
  return p;
}

TEST(ParameterStoreTest, OnTheCpuTheBackendTensorsAreTheHostTensors) {
  OptimizerOptions adamw;
  auto s = ParameterStore::Create(GetCpuBackend(), {"w", "b"}, TwoParameters(), adamw);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ParameterStore& store = **s;
  std::map<std::string, Tensor*> dev = store.BackendParameters();
  ASSERT_EQ(dev.size(), 2u);
  EXPECT_EQ(dev.at("w"), &store.host_params().at("w"));
  EXPECT_EQ(dev.at("b"), &store.host_params().at("b"));
  // AdamW: m and v per parameter, zero, of its shape.
  ASSERT_EQ(store.host_m().size(), 2u);
  ASSERT_EQ(store.host_v().size(), 2u);
  EXPECT_TRUE(store.host_m().at("w").BitwiseEqual(Tensor(DType::kFloat32, {2, 2})));
  EXPECT_TRUE(store.host_v().at("b").BitwiseEqual(Tensor(DType::kFloat32, {3})));

  Tensor gw(DType::kFloat32, {2, 2}), gb(DType::kFloat32, {3});
  auto updates = store.Updates({&gw, &gb}, {"w_grad", "b_grad"});
  ASSERT_TRUE(updates.ok()) << updates.status().message();
  ASSERT_EQ(updates->size(), 2u);
  EXPECT_EQ((*updates)[0].param, dev.at("w"));
  EXPECT_EQ((*updates)[0].grad, &gw);
  EXPECT_EQ((*updates)[1].m, &store.host_m().at("b"));
  EXPECT_EQ((*updates)[1].v, &store.host_v().at("b"));
}

TEST(ParameterStoreTest, SlotsFollowTheOptimizer) {
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::kSgd;
  auto plain = ParameterStore::Create(GetCpuBackend(), {"w", "b"}, TwoParameters(), sgd);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)->host_m().empty());
  EXPECT_TRUE((*plain)->host_v().empty());
  Tensor gw(DType::kFloat32, {2, 2}), gb(DType::kFloat32, {3});
  auto u = (*plain)->Updates({&gw, &gb}, {"w_grad", "b_grad"});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)[0].m, nullptr);
  EXPECT_EQ((*u)[0].v, nullptr);

  sgd.momentum = 0.9;
  auto momentum = ParameterStore::Create(GetCpuBackend(), {"w", "b"}, TwoParameters(), sgd);
  ASSERT_TRUE(momentum.ok());
  EXPECT_EQ((*momentum)->host_m().size(), 2u);
  EXPECT_TRUE((*momentum)->host_v().empty());
}

TEST(ParameterStoreTest, AGradientOfAnotherTypeIsNamed) {
  auto s = ParameterStore::Create(GetCpuBackend(), {"w", "b"}, TwoParameters(), {});
  ASSERT_TRUE(s.ok());
  Tensor gw(DType::kFloat32, {4}), gb(DType::kFloat32, {3});
  auto u = (*s)->Updates({&gw, &gb}, {"w_grad", "b_grad"});
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message(), "gradient 'w_grad' is f32[4] but parameter 'w' is f32[2,2]");
}

TEST(ParameterStoreTest, OnADeviceItMirrorsPushesAndPullsOnlyWhenStale) {
  SeparateMemoryBackend device;
  {
    auto s = ParameterStore::Create(device, {"w", "b"}, TwoParameters(), {});
    ASSERT_TRUE(s.ok()) << s.status().message();
    ParameterStore& store = **s;
    // One backend copy per parameter and per AdamW slot, counted under its class, each pushed.
    EXPECT_EQ(device.Bytes()[MemoryClass::kParameter].live, 4 * (4 + 3));
    EXPECT_EQ(device.Bytes()[MemoryClass::kOptimizerState].live, 2 * 4 * (4 + 3));
    EXPECT_EQ(device.copies_in, 6);
    std::map<std::string, Tensor*> dev = store.BackendParameters();
    EXPECT_NE(dev.at("w")->raw(), store.host_params().at("w").raw());
    EXPECT_TRUE(dev.at("w")->BitwiseEqual(store.host_params().at("w")));
    EXPECT_TRUE(dev.at("b")->BitwiseEqual(store.host_params().at("b")));

    // Nothing changed the backend copies: a pull copies nothing.
    ASSERT_TRUE(store.Pull().ok());
    EXPECT_EQ(device.copies_out, 0);
    // A step changes them (here by hand): after MarkStale, one pull brings every tensor back.
    store.MarkStale();
    dev.at("w")->data<float>()[3] = 40;
    auto updates = store.Updates({dev.at("w"), dev.at("b")}, {"w_grad", "b_grad"});
    ASSERT_TRUE(updates.ok());
    (*updates)[1].m->data<float>()[0] = 7;
    ASSERT_TRUE(store.Pull().ok());
    EXPECT_EQ(device.copies_out, 6);
    EXPECT_EQ(store.host_params().at("w").data<float>()[3], 40);
    EXPECT_EQ(store.host_m().at("b").data<float>()[0], 7);
    ASSERT_TRUE(store.Pull().ok());
    EXPECT_EQ(device.copies_out, 6);

    // A resume writes the host copies, then pushes.
    store.host_params().at("b").data<float>()[2] = -5;
    ASSERT_TRUE(store.Push().ok());
    EXPECT_EQ(dev.at("b")->data<float>()[2], -5);
  }
  // The store's regions went back to the backend with it.
  EXPECT_EQ(device.Bytes()[MemoryClass::kParameter].live, 0);
  EXPECT_EQ(device.Bytes()[MemoryClass::kOptimizerState].live, 0);
}

}  // namespace
}  // namespace foundry
