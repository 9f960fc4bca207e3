// The part of NCCL's C ABI that runtime/nccl_communicator.cc calls, declared here: the build has
// no NCCL header (NCCL is loaded at run time), and these declarations are written from NCCL's
// documentation, not copied from its header. tests/runtime/nccl_abi_test.cc checks them against
// nccl.h where a machine has one (the CUDA toolkit's include folder may).
//
// Sources: NCCL's documentation, "Types" (docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/
// types.html), "Communicator Creation and Management Functions" (.../api/comms.html), "Collective
// Communication Functions", "Group Calls" and "Point To Point Communication Functions"; the enum
// values, which the documentation lists by name only, from NCCL's src/nccl.h.in (as vendored e.g.
// by aws/aws-ofi-nccl, 3rd-party/nccl/cuda/include/nccl/types.h):
//  - ncclComm_t is a pointer to an opaque struct: void* here.
//  - ncclUniqueId is `struct { char internal[NCCL_UNIQUE_ID_BYTES]; }` with
//    NCCL_UNIQUE_ID_BYTES = 128, passed BY VALUE to ncclCommInitRank: the same struct here.
//  - ncclResult_t: ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2,
//    ncclInternalError = 3, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6,
//    ncclInProgress = 7. A C enum: an int in the ABI.
//  - ncclDataType_t: ncclInt8 = ncclChar = 0, ncclUint8 = 1, ... ncclFloat32 = 7 (a C enum: an
//    int). We move bytes only: ncclUint8.
//  - cudaStream_t is a pointer (struct CUstream_st*): void* here.
//  - The version code (ncclGetVersion) is NCCL_VERSION(X, Y, Z): X*1000 + Y*100 + Z up to 2.8,
//    X*10000 + Y*100 + Z from 2.9 on.
#pragma once

#include <cstddef>
#include <string>

namespace foundry::nccl_abi {

inline constexpr int kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};
static_assert(sizeof(UniqueId) == 128);
using Result = int;                    // ncclResult_t
inline constexpr Result kSuccess = 0;  // ncclSuccess
// ncclDataType_t, as a type of its own (an int in the ABI) so that the test against nccl.h tells
// it from the int arguments beside it.
enum class DataType : int { kUint8 = 1 };  // ncclUint8
using Comm = void*;                        // ncclComm_t
using Stream = void*;                      // cudaStream_t

// One type per function, named after it.
using GetVersionFn = Result (*)(int* version);
using GetUniqueIdFn = Result (*)(UniqueId* unique_id);
using CommInitRankFn = Result (*)(Comm* comm, int nranks, UniqueId comm_id, int rank);
using CommDestroyFn = Result (*)(Comm comm);
using CommAbortFn = Result (*)(Comm comm);
using GetErrorStringFn = const char* (*)(Result result);
using GetLastErrorFn = const char* (*)(Comm comm);  // NCCL 2.13 and newer
using AllGatherFn = Result (*)(const void* sendbuff, void* recvbuff, size_t sendcount,
                               DataType datatype, Comm comm, Stream stream);
using BroadcastFn = Result (*)(const void* sendbuff, void* recvbuff, size_t count,
                               DataType datatype, int root, Comm comm, Stream stream);
using SendFn = Result (*)(const void* sendbuff, size_t count, DataType datatype, int peer,
                          Comm comm, Stream stream);
using RecvFn = Result (*)(void* recvbuff, size_t count, DataType datatype, int peer, Comm comm,
                          Stream stream);
using GroupStartFn = Result (*)();
using GroupEndFn = Result (*)();

// "2.28.9" for a version code (either encoding above).
std::string VersionText(int code);

}  // namespace foundry::nccl_abi
