// runtime/nccl_abi.h, our own declarations of NCCL's ABI, against NCCL's header where this machine
// has one (the CUDA 13 toolkit ships nccl.h; the build never needs it): every function type, once
// NCCL's handle and enum types are replaced by the ones we declare, is the header's; the id's size
// and the two enum values we use are the header's; the version decoding reads NCCL_VERSION's
// codes of both encodings. And the loaded library (when one loads) is an NCCL of that encoding.
#include "runtime/nccl_abi.h"

#include <gtest/gtest.h>

#include <regex>
#include <type_traits>

#include "runtime/nccl_communicator.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define FOUNDRY_TEST_HAVE_NCCL_H 1
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_TEST_HAVE_NCCL_H

// NCCL's type -> ours (runtime/nccl_abi.h); everything else as it is.
template <class T>
struct Ours {
  using type = T;
};
template <>
struct Ours<ncclComm_t> {
  using type = nccl_abi::Comm;
};
template <>
struct Ours<ncclComm_t*> {
  using type = nccl_abi::Comm*;
};
template <>
struct Ours<ncclResult_t> {
  using type = nccl_abi::Result;
};
template <>
struct Ours<ncclDataType_t> {
  using type = nccl_abi::DataType;
};
template <>
struct Ours<cudaStream_t> {
  using type = nccl_abi::Stream;
};
template <>
struct Ours<ncclUniqueId> {
  using type = nccl_abi::UniqueId;
};
template <>
struct Ours<ncclUniqueId*> {
  using type = nccl_abi::UniqueId*;
};
template <class R, class... A>
struct Ours<R (*)(A...)> {
  using type = typename Ours<R>::type (*)(typename Ours<A>::type...);
};
template <class F>
using OursOf = typename Ours<F>::type;

static_assert(std::is_same_v<OursOf<decltype(&ncclGetVersion)>, nccl_abi::GetVersionFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclGetUniqueId)>, nccl_abi::GetUniqueIdFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclCommInitRank)>, nccl_abi::CommInitRankFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclCommDestroy)>, nccl_abi::CommDestroyFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclCommAbort)>, nccl_abi::CommAbortFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclGetErrorString)>, nccl_abi::GetErrorStringFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclGetLastError)>, nccl_abi::GetLastErrorFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclAllGather)>, nccl_abi::AllGatherFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclBroadcast)>, nccl_abi::BroadcastFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclSend)>, nccl_abi::SendFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclRecv)>, nccl_abi::RecvFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclGroupStart)>, nccl_abi::GroupStartFn>);
static_assert(std::is_same_v<OursOf<decltype(&ncclGroupEnd)>, nccl_abi::GroupEndFn>);

TEST(NcclAbiTest, OurDeclarationsAreTheHeaders) {
  // (The function types are checked at compile time above.)
  EXPECT_EQ(NCCL_UNIQUE_ID_BYTES, nccl_abi::kUniqueIdBytes);
  EXPECT_EQ(sizeof(ncclUniqueId), sizeof(nccl_abi::UniqueId));
  EXPECT_EQ(alignof(ncclUniqueId), alignof(nccl_abi::UniqueId));
  EXPECT_EQ(static_cast<int>(ncclSuccess), nccl_abi::kSuccess);
  EXPECT_EQ(static_cast<int>(ncclUint8), static_cast<int>(nccl_abi::DataType::kUint8));
  EXPECT_EQ(sizeof(ncclResult_t), sizeof(nccl_abi::Result));
  EXPECT_EQ(sizeof(ncclDataType_t), sizeof(nccl_abi::DataType));
  EXPECT_EQ(sizeof(ncclComm_t), sizeof(nccl_abi::Comm));
  EXPECT_EQ(sizeof(cudaStream_t), sizeof(nccl_abi::Stream));
}

TEST(NcclAbiTest, VersionCodesOfBothEncodings) {
  EXPECT_EQ(nccl_abi::VersionText(NCCL_VERSION(2, 7, 8)), "2.7.8");
  EXPECT_EQ(nccl_abi::VersionText(NCCL_VERSION(2, 8, 4)), "2.8.4");
  EXPECT_EQ(nccl_abi::VersionText(NCCL_VERSION(2, 9, 6)), "2.9.6");
  EXPECT_EQ(nccl_abi::VersionText(NCCL_VERSION(2, 28, 9)), "2.28.9");
  EXPECT_EQ(nccl_abi::VersionText(NCCL_VERSION_CODE), std::to_string(NCCL_MAJOR) + "." +
                                                          std::to_string(NCCL_MINOR) + "." +
                                                          std::to_string(NCCL_PATCH));
}

#else

TEST(NcclAbiTest, OurDeclarationsAreTheHeaders) { GTEST_SKIP() << "no nccl.h on this machine"; }

#endif

// Where NCCL loads (FOUNDRY_NCCL_LIBRARY or libnccl.so.2): every function found, its version read.
TEST(NcclAbiTest, TheLoadedLibraryIsNccl) {
  auto lib = LoadNcclLibrary();
  if (!lib.ok()) GTEST_SKIP() << lib.status().message();
  EXPECT_GE(lib->version_code, 2700) << lib->version;  // 2.7: ncclSend / ncclRecv
  EXPECT_TRUE(std::regex_match(lib->version, std::regex("2\\.[0-9]+\\.[0-9]+"))) << lib->version;
  EXPECT_EQ(lib->version, nccl_abi::VersionText(lib->version_code));
  // Named as it was asked for: FOUNDRY_NCCL_LIBRARY's value, else the loader's search.
  const char* env = std::getenv("FOUNDRY_NCCL_LIBRARY");
  EXPECT_EQ(lib->path, env && *env ? env : "libnccl.so.2");
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef FOUNDRY_TEST_HAVE_NCCL_H
