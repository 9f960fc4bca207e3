// NCCL as a Communicator (kernels/cpu/communicator.h) on the CUDA backend's device memory.
//
// NCCL is loaded at run time: dlopen of FOUNDRY_NCCL_LIBRARY (a path) when it is set, else of
// "libnccl.so.2" through the loader's search path (the GPU machine's PyTorch ships it in its
// nvidia wheels: site-packages/nvidia/nccl/lib). The build never needs NCCL's headers or library;
// the types it shares with NCCL are declared in nccl_communicator.cc from NCCL's documented ABI.
//
// Every collective is enqueued on the backend's one work stream (CudaBackend::stream()), in order
// with the kernels around it: a buffer a collective writes is ready for the next kernel on that
// stream, and for the host after the next wait (a copy back, Barrier). Bytes only (ncclUint8):
// NCCL never reduces for us (docs/design.md §10: exchange, then add in rank order ourselves).
//   AllGather  ncclAllGather
//   AllToAll   one ncclSend and one ncclRecv per rank inside ncclGroupStart / ncclGroupEnd
//   Broadcast  ncclBroadcast in place
//   Barrier    an all-gather of 4 bytes per rank, then a wait for the stream
//
// The NCCL id (128 bytes) reaches every rank through a host communicator's Broadcast (MPI: rank 0
// makes it), or without one through a file every rank sees (FOUNDRY_NCCL_ID_FILE): rank 0 writes
// it atomically (a temporary file renamed into place) and removes it once every rank has joined;
// the others poll for it. One GPU per rank: NCCL (2.5 and newer) refuses two ranks of one
// communicator on the same GPU ("Duplicate GPU detected"), and the backend runs on device 0, so
// ranks on a multi-GPU machine each need their own CUDA_VISIBLE_DEVICES.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/cpu/communicator.h"

namespace foundry {

class CudaBackend;

// The NCCL library a communicator would use, loaded and checked: FOUNDRY_NCCL_LIBRARY when set,
// else libnccl.so.2. Errors, one line each:
//   "NCCL not found: dlopen libnccl.so.2 failed (<dlerror>); install NVIDIA's NCCL (e.g. the
//    nvidia-nccl-cu12 wheel) or set FOUNDRY_NCCL_LIBRARY"
//   "NCCL not found: dlopen <path> (FOUNDRY_NCCL_LIBRARY) failed (<dlerror>); set
//    FOUNDRY_NCCL_LIBRARY to NCCL's libnccl.so.2 (...)"
//   "<path>: not an NCCL library: missing symbol ncclCommInitRank; ..."
//   "<path>: NCCL <version> has no <function>; foundry needs NCCL 2.7 or newer"
struct NcclLibraryInfo {
  std::string path;      // what was opened: FOUNDRY_NCCL_LIBRARY's value or "libnccl.so.2"
  int version_code = 0;  // ncclGetVersion: 22703 for 2.27.3
  std::string version;   // "2.27.3"
};
StatusOr<NcclLibraryInfo> LoadNcclLibrary();
// What LoadNcclLibrary does once it has chosen: opens `path` (from_env: FOUNDRY_NCCL_LIBRARY's
// value, else the default name), with the errors above. For tests on machines that have NCCL.
StatusOr<NcclLibraryInfo> LoadNcclLibraryFrom(const std::string& path, bool from_env);

// A communicator over NCCL on `backend`'s stream. `host` (may be null): a host-memory
// communicator of the same ranks (MPI) that carries the NCCL id from rank 0; its rank and size
// are the NCCL communicator's. Without one, the ranks meet through a file: FOUNDRY_NCCL_ID_FILE,
// FOUNDRY_RANK and FOUNDRY_WORLD_SIZE (FOUNDRY_NCCL_ID_TIMEOUT_S, default 300, bounds the wait);
// with none of the three set, a world of one rank. Loads NCCL first (LoadNcclLibrary's errors,
// unchanged), so a machine without NCCL says so before anything else happens.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(CudaBackend& backend,
                                                               Communicator* host);

// --- the steps before NCCL's (used by CreateNcclCommunicator; declared here for their tests) ---

inline constexpr int kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (runtime/nccl_abi.h cites it)
using NcclId = std::array<char, kNcclIdBytes>;

// Who this process is in the NCCL world and the id it joins with, as CreateNcclCommunicator
// finds them (after loading NCCL, LoadNcclLibrary's errors unchanged): through `host`, or the
// three variables (rank 0 makes the id with ncclGetUniqueId and writes the id file, the others
// wait for it), or a world of one. Needs no GPU. One-line errors for a host communicator that is
// not a host-memory one, an incomplete set of variables ("... set all three (missing: ...)"),
// a rank outside the world, a value that is not a number, and the id file's errors below.
struct NcclJoin {
  int rank = 0;
  int size = 1;
  NcclId id{};
  std::string id_file;  // the id file rank 0 removes once every rank has joined ("": none)
};
StatusOr<NcclJoin> JoinNcclWorld(Communicator* host);

// Rank 0: writes `id` for a world of `world_size` ranks to `path` atomically (PATH.tmp.PID, then
// rename). An error when `path` already exists: "FOUNDRY_NCCL_ID_FILE=<path> already exists (left
// by an earlier run?); delete it before starting the ranks". (Rank 0 removes the file once every
// rank has joined, so only a run that died before that leaves one; its other ranks may then read
// the dead id and fail in ncclCommInitRank instead.)
Status WriteNcclIdFile(const std::string& path, const NcclId& id, int world_size);
// The other ranks: waits up to `timeout_s` seconds for `path` to appear, polling every 10 ms, and
// reads it. Errors name the file and say what to check: none after the timeout; a file that is
// not an id file; a file written for another world size.
StatusOr<NcclId> ReadNcclIdFile(const std::string& path, int rank, int world_size,
                                double timeout_s);

}  // namespace foundry
