#include "runtime/nccl_communicator.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "runtime/cuda_backend.h"
#include "runtime/nccl_abi.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace foundry {
namespace {

using namespace nccl_abi;  // NOLINT: NCCL's types and function types (runtime/nccl_abi.h)

using NcclResult = Result;
constexpr Result kNcclSuccess = kSuccess;
constexpr DataType kNcclUint8 = DataType::kUint8;
using NcclUniqueIdAbi = UniqueId;
static_assert(kUniqueIdBytes == kNcclIdBytes);

// NCCL's functions, found by dlsym.
struct NcclApi {
  std::string path;
  int version_code = 0;
  GetVersionFn GetVersion = nullptr;
  GetUniqueIdFn GetUniqueId = nullptr;
  CommInitRankFn CommInitRank = nullptr;
  CommDestroyFn CommDestroy = nullptr;
  CommAbortFn CommAbort = nullptr;
  GetErrorStringFn GetErrorString = nullptr;
  GetLastErrorFn GetLastError = nullptr;  // optional
  AllGatherFn AllGather = nullptr;
  BroadcastFn Broadcast = nullptr;
  SendFn Send = nullptr;
  RecvFn Recv = nullptr;
  GroupStartFn GroupStart = nullptr;
  GroupEndFn GroupEnd = nullptr;
};

constexpr const char* kDefaultLibrary = "libnccl.so.2";
constexpr const char* kSetLibrary =
    "set FOUNDRY_NCCL_LIBRARY to NCCL's libnccl.so.2 (e.g. site-packages/nvidia/nccl/lib/"
    "libnccl.so.2 of PyTorch's nvidia-nccl wheel)";

// dlerror's text on one line.
std::string DlError() {
  const char* e = dlerror();
  std::string s = e ? e : "unknown error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

StatusOr<std::shared_ptr<const NcclApi>> OpenNccl(const std::string& path, bool from_env) {
  // Loaded once per path; a library that loaded stays loaded (NCCL's threads outlive its
  // communicators, so it is never dlclose'd).
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const NcclApi>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    if (from_env)
      return Error("NCCL not found: dlopen " + path + " (FOUNDRY_NCCL_LIBRARY) failed (" +
                   DlError() + "); " + kSetLibrary);
    return Error("NCCL not found: dlopen " + path + " failed (" + DlError() +
                 "); install NVIDIA's NCCL (e.g. the nvidia-nccl-cu12 wheel) or set "
                 "FOUNDRY_NCCL_LIBRARY");
  }
  auto api = std::make_shared<NcclApi>();
  api->path = path;
  auto sym = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    return fn != nullptr;
  };
  // ncclCommInitRank first: the one function that says "this is NCCL".
  if (!sym("ncclCommInitRank", api->CommInitRank) || !sym("ncclGetVersion", api->GetVersion)) {
    const char* missing = api->CommInitRank ? "ncclGetVersion" : "ncclCommInitRank";
    dlclose(h);
    return Error(path + ": not an NCCL library: missing symbol " + missing + "; " + kSetLibrary);
  }
  if (api->GetVersion(&api->version_code) != kNcclSuccess) {
    dlclose(h);
    return Error(path + ": ncclGetVersion failed; " + kSetLibrary);
  }
  // ncclSend / ncclRecv came with NCCL 2.7.
  const std::pair<const char*, bool> needed[] = {
      {"ncclGetUniqueId", sym("ncclGetUniqueId", api->GetUniqueId)},
      {"ncclCommDestroy", sym("ncclCommDestroy", api->CommDestroy)},
      {"ncclCommAbort", sym("ncclCommAbort", api->CommAbort)},
      {"ncclGetErrorString", sym("ncclGetErrorString", api->GetErrorString)},
      {"ncclAllGather", sym("ncclAllGather", api->AllGather)},
      {"ncclBroadcast", sym("ncclBroadcast", api->Broadcast)},
      {"ncclSend", sym("ncclSend", api->Send)},
      {"ncclRecv", sym("ncclRecv", api->Recv)},
      {"ncclGroupStart", sym("ncclGroupStart", api->GroupStart)},
      {"ncclGroupEnd", sym("ncclGroupEnd", api->GroupEnd)},
  };
  for (const auto& [name, found] : needed) {
    if (found) continue;
    dlclose(h);
    return Error(path + ": NCCL " + VersionText(api->version_code) + " has no " + name +
                 "; foundry needs NCCL 2.7 or newer");
  }
  sym("ncclGetLastError", api->GetLastError);
  loaded[path] = api;
  return std::shared_ptr<const NcclApi>(api);
}

StatusOr<std::shared_ptr<const NcclApi>> OpenConfiguredNccl() {
  const char* env = std::getenv("FOUNDRY_NCCL_LIBRARY");
  if (env && *env) return OpenNccl(env, true);
  return OpenNccl(kDefaultLibrary, false);
}

// An environment variable as an int; `fallback` when unset.
StatusOr<int> EnvIntOr(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 20)
    return Error(std::string(name) + "=" + v + ": not a whole number (0 or more)");
  return static_cast<int>(x);
}

std::string NcclFailure(const NcclApi& api, const char* call, NcclResult r) {
  std::string msg = std::string("nccl: ") + call + " failed: " + api.GetErrorString(r);
  if (api.GetLastError) {
    const char* last = api.GetLastError(nullptr);
    if (last && *last) msg += " (" + std::string(last) + ")";
  }
  return msg;
}

constexpr const char* kIdMagic = "foundry-nccl-id 1 world_size ";

std::string IdFileHeader(int world_size) { return kIdMagic + std::to_string(world_size) + "\n"; }

#ifdef FOUNDRY_HAVE_CUDA

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<const NcclApi> api, void* comm, void* stream, int rank, int size,
                   void* scratch)
      : api_(std::move(api)),
        comm_(comm),
        stream_(stream),
        rank_(rank),
        size_(size),
        scratch_(scratch) {}

  ~NcclCommunicator() override {
    // A communicator whose call failed may hold work that never ends: abort it, never wait.
    if (broken_) {
      api_->CommAbort(comm_);
    } else {
      (void)cuda::Synchronize(stream_, "");
      api_->CommDestroy(comm_);
    }
    cuda::DeviceFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    RETURN_IF_ERROR(CheckBytes("AllGather", bytes));
    if (bytes == 0) return Status::Ok();
    return Check("ncclAllGather", api_->AllGather(send, recv, static_cast<size_t>(bytes),
                                                  kNcclUint8, comm_, stream_));
  }

  Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override {
    RETURN_IF_ERROR(CheckBytes("AllToAll", bytes_per_rank));
    if (bytes_per_rank == 0) return Status::Ok();
    const auto* s = static_cast<const std::byte*>(send);
    auto* r = static_cast<std::byte*>(recv);
    const auto n = static_cast<size_t>(bytes_per_rank);
    RETURN_IF_ERROR(Check("ncclGroupStart", api_->GroupStart()));
    Status first = Status::Ok();
    for (int p = 0; p < size_ && first.ok(); ++p) {
      const size_t off = static_cast<size_t>(p) * n;
      first = Check("ncclSend", api_->Send(s + off, n, kNcclUint8, p, comm_, stream_));
      if (first.ok())
        first = Check("ncclRecv", api_->Recv(r + off, n, kNcclUint8, p, comm_, stream_));
    }
    // The group is closed on every path (an open group would swallow the next call).
    Status end = Check("ncclGroupEnd", api_->GroupEnd());
    return first.ok() ? end : first;
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    RETURN_IF_ERROR(CheckBytes("Broadcast", bytes));
    if (root < 0 || root >= size_)
      return Error("nccl: Broadcast from rank " + std::to_string(root) + " in a world of " +
                   std::to_string(size_) + " ranks");
    if (bytes == 0) return Status::Ok();
    return Check("ncclBroadcast", api_->Broadcast(data, data, static_cast<size_t>(bytes),
                                                  kNcclUint8, root, comm_, stream_));
  }

  Status Barrier() override {
    auto* recv = static_cast<std::byte*>(scratch_) + 4;
    RETURN_IF_ERROR(
        Check("ncclAllGather", api_->AllGather(scratch_, recv, 4, kNcclUint8, comm_, stream_)));
    return cuda::Synchronize(stream_, "nccl: Barrier");
  }

 private:
  Status CheckBytes(const char* op, int64_t bytes) const {
    if (bytes < 0)
      return Error(std::string("nccl: ") + op + " of " + std::to_string(bytes) + " bytes");
    return Status::Ok();
  }
  Status Check(const char* call, NcclResult r) {
    if (r == kNcclSuccess) return Status::Ok();
    broken_ = true;
    std::string msg = std::string("nccl: ") + call + " failed: " + api_->GetErrorString(r);
    if (api_->GetLastError) {
      const char* last = api_->GetLastError(comm_);
      if (last && *last) msg += " (" + std::string(last) + ")";
    }
    return Error(msg);
  }

  std::shared_ptr<const NcclApi> api_;
  void* comm_;
  void* stream_;
  int rank_;
  int size_;
  void* scratch_;  // Barrier's 4 bytes to send, then 4 bytes per rank to receive
  bool broken_ = false;
};

#endif  // FOUNDRY_HAVE_CUDA

}  // namespace

std::string nccl_abi::VersionText(int code) {
  int major, minor, patch;
  if (code < 10000) {
    major = code / 1000, minor = code % 1000 / 100, patch = code % 100;
  } else {
    major = code / 10000, minor = code % 10000 / 100, patch = code % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

StatusOr<NcclLibraryInfo> LoadNcclLibrary() {
  ASSIGN_OR_RETURN(std::shared_ptr<const NcclApi> api, OpenConfiguredNccl());
  return NcclLibraryInfo{api->path, api->version_code, VersionText(api->version_code)};
}

StatusOr<NcclLibraryInfo> LoadNcclLibraryFrom(const std::string& path, bool from_env) {
  ASSIGN_OR_RETURN(std::shared_ptr<const NcclApi> api, OpenNccl(path, from_env));
  return NcclLibraryInfo{api->path, api->version_code, VersionText(api->version_code)};
}

Status WriteNcclIdFile(const std::string& path, const NcclId& id, int world_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec))
    return Error("FOUNDRY_NCCL_ID_FILE=" + path +
                 " already exists (left by an earlier run?); delete it before starting the ranks");
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string head = IdFileHeader(world_size);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    out.write(id.data(), kNcclIdBytes);
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return Error("FOUNDRY_NCCL_ID_FILE=" + path + ": cannot write " + tmp +
                   "; give a path in a writable folder that every rank sees");
    }
  }
  // rename() replaces atomically: a reader sees no file or the whole file.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    fs::remove(tmp, ec);
    return Error("FOUNDRY_NCCL_ID_FILE=" + path + ": cannot rename " + tmp + " to it (" + why +
                 ")");
  }
  return Status::Ok();
}

StatusOr<NcclId> ReadNcclIdFile(const std::string& path, int rank, int world_size,
                                double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      const size_t eol = bytes.find('\n');
      const std::string head = eol == std::string::npos ? "" : bytes.substr(0, eol + 1);
      if (head.rfind(kIdMagic, 0) != 0 || bytes.size() != head.size() + kNcclIdBytes)
        return Error("FOUNDRY_NCCL_ID_FILE=" + path +
                     " is not an NCCL id file written by rank 0 (" + std::to_string(bytes.size()) +
                     " bytes); delete it and start every rank again");
      if (head != IdFileHeader(world_size))
        return Error("FOUNDRY_NCCL_ID_FILE=" + path + " was written by rank 0 of a world of " +
                     head.substr(std::strlen(kIdMagic), head.size() - std::strlen(kIdMagic) - 1) +
                     " ranks, rank " + std::to_string(rank) + " is in a world of " +
                     std::to_string(world_size) + "; start every rank with the same world size");
      NcclId id;
      std::memcpy(id.data(), bytes.data() + head.size(), kNcclIdBytes);
      return id;
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= timeout_s) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s);
      return Error("rank " + std::to_string(rank) + ": no NCCL id in FOUNDRY_NCCL_ID_FILE=" + path +
                   " after " + secs +
                   " s; is rank 0 running, with the same FOUNDRY_NCCL_ID_FILE on a file system "
                   "every rank sees? (FOUNDRY_NCCL_ID_TIMEOUT_S sets the wait)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

StatusOr<NcclJoin> JoinNcclWorld(Communicator* host) {
  ASSIGN_OR_RETURN(std::shared_ptr<const NcclApi> api, OpenConfiguredNccl());
  NcclJoin join;
  NcclUniqueIdAbi id{};
  auto make_id = [&]() -> Status {
    NcclResult r = api->GetUniqueId(&id);
    if (r != kNcclSuccess) return Error(NcclFailure(*api, "ncclGetUniqueId", r));
    std::memcpy(join.id.data(), id.internal, kNcclIdBytes);
    return Status::Ok();
  };
  if (host) {
    if (host->name() == "nccl")
      return Error("nccl: the NCCL id travels through a host-memory communicator (mpi), not " +
                   std::string(host->name()));
    join.rank = host->rank();
    join.size = host->size();
    if (join.rank == 0) RETURN_IF_ERROR(make_id());
    RETURN_IF_ERROR(host->Broadcast(join.id.data(), kNcclIdBytes, 0)
                        .Prepend("nccl: sending the NCCL id from rank 0: "));
    return join;
  }
  const char* file = std::getenv("FOUNDRY_NCCL_ID_FILE");
  const bool have_file = file && *file;
  const bool have_rank = std::getenv("FOUNDRY_RANK") && *std::getenv("FOUNDRY_RANK");
  const bool have_size = std::getenv("FOUNDRY_WORLD_SIZE") && *std::getenv("FOUNDRY_WORLD_SIZE");
  if (!have_file && !have_rank && !have_size) {
    RETURN_IF_ERROR(make_id());
    return join;
  }
  if (!have_file || !have_rank || !have_size) {
    std::string missing;
    for (auto [name, have] :
         {std::pair{"FOUNDRY_NCCL_ID_FILE", have_file}, std::pair{"FOUNDRY_RANK", have_rank},
          std::pair{"FOUNDRY_WORLD_SIZE", have_size}})
      if (!have) missing += (missing.empty() ? "" : ", ") + std::string(name);
    return Error(
        "nccl: without MPI the ranks meet through FOUNDRY_NCCL_ID_FILE, FOUNDRY_RANK and "
        "FOUNDRY_WORLD_SIZE; set all three (missing: " +
        missing + ")");
  }
  ASSIGN_OR_RETURN(join.rank, EnvIntOr("FOUNDRY_RANK", 0));
  ASSIGN_OR_RETURN(join.size, EnvIntOr("FOUNDRY_WORLD_SIZE", 1));
  if (join.size < 1 || join.rank >= join.size)
    return Error("nccl: FOUNDRY_RANK=" + std::to_string(join.rank) + " is not a rank of " +
                 "FOUNDRY_WORLD_SIZE=" + std::to_string(join.size) + " (0 to size - 1)");
  ASSIGN_OR_RETURN(int timeout_s, EnvIntOr("FOUNDRY_NCCL_ID_TIMEOUT_S", 300));
  join.id_file = file;
  if (join.rank == 0) {
    RETURN_IF_ERROR(make_id());
    RETURN_IF_ERROR(WriteNcclIdFile(file, join.id, join.size));
  } else {
    ASSIGN_OR_RETURN(join.id, ReadNcclIdFile(file, join.rank, join.size, timeout_s));
  }
  return join;
}

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(CudaBackend& backend,
                                                               Communicator* host) {
  ASSIGN_OR_RETURN(std::shared_ptr<const NcclApi> api, OpenConfiguredNccl());
#ifndef FOUNDRY_HAVE_CUDA
  (void)backend;
  (void)host;
  return Error("nccl: this foundry was built without the CUDA backend (no nvcc at configure time)");
#else
  ASSIGN_OR_RETURN(NcclJoin join, JoinNcclWorld(host));
  NcclUniqueIdAbi id;
  std::memcpy(id.internal, join.id.data(), kNcclIdBytes);
  void* comm = nullptr;
  // Collective: returns once every rank has joined (so rank 0 may remove the id file then).
  NcclResult r = api->CommInitRank(&comm, join.size, id, join.rank);
  if (join.rank == 0 && !join.id_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(join.id_file, ec);
  }
  if (r != kNcclSuccess)
    return Error(NcclFailure(*api, "ncclCommInitRank", r) + " (rank " + std::to_string(join.rank) +
                 " of " + std::to_string(join.size) + "; one GPU per rank)");
  void* scratch = nullptr;
  Status st = cuda::DeviceAlloc(4 + 4 * static_cast<int64_t>(join.size), &scratch, backend.stream(),
                                "nccl: the barrier's buffer");
  if (!st.ok()) {
    api->CommDestroy(comm);
    return st;
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(api, comm, backend.stream(), join.rank, join.size, scratch));
#endif
}

}  // namespace foundry
