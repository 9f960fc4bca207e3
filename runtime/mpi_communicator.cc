// MpiWorld and its communicator (runtime/mpi_communicator.h).
#include "runtime/mpi_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#ifdef FOUNDRY_MPI
// The C API only: without these, a C++ file including mpi.h needs the MPI C++ bindings' library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace foundry {

namespace {

int64_t chunk_bytes = int64_t{1} << 30;

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 0 && n <= std::numeric_limits<int>::max()) ? static_cast<int>(n)
                                                                          : -1;
}

int FirstEnvInt(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (int v = EnvInt(n); v >= 0) return v;
  return -1;
}

}  // namespace

int64_t MpiChunkBytes() { return chunk_bytes; }
void SetMpiChunkBytes(int64_t bytes) {
  chunk_bytes = std::clamp<int64_t>(bytes, 1, std::numeric_limits<int>::max());
}

int LauncherWorldSize() {
  int n = FirstEnvInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"});
  return n < 0 ? 0 : n;
}

int LauncherRank() {
  int r = FirstEnvInt({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  return r < 0 ? 0 : r;
}

#ifndef FOUNDRY_MPI

bool BuiltWithMpi() { return false; }

StatusOr<Communicator*> MpiWorld() {
  return Error(
      "foundry was built without MPI; install it (scripts/setup.sh installs openmpi-bin and "
      "libopenmpi-dev) and reconfigure the build with cmake");
}

void MpiAbortWorld(int) {}

#else  // FOUNDRY_MPI

bool BuiltWithMpi() { return true; }

namespace {

Status MpiStatus(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  std::string words =
      len > 0 ? std::string(text, static_cast<size_t>(len)) : "MPI error " + std::to_string(rc);
  return Error("MPI " + what + " failed: " + words);
}

// A datatype of `len` bytes whose extent is `extent` bytes: count 1 of it per rank lays rank r's
// part at buffer + r * extent, with extent an int64 (MPI_Aint) where counts are int.
class StridedBytes {
 public:
  StridedBytes(int len, int64_t extent) {
    MPI_Datatype contiguous;
    rc_ = MPI_Type_contiguous(len, MPI_BYTE, &contiguous);
    if (rc_ != MPI_SUCCESS) return;
    rc_ = MPI_Type_create_resized(contiguous, 0, static_cast<MPI_Aint>(extent), &type_);
    MPI_Type_free(&contiguous);
    if (rc_ != MPI_SUCCESS) return;
    rc_ = MPI_Type_commit(&type_);
    committed_ = rc_ == MPI_SUCCESS;
  }
  ~StridedBytes() {
    if (committed_) MPI_Type_free(&type_);
  }
  StridedBytes(const StridedBytes&) = delete;
  StridedBytes& operator=(const StridedBytes&) = delete;
  int rc() const { return rc_; }
  MPI_Datatype type() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int rc_ = MPI_SUCCESS;
  bool committed_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }

  Status AllGather(const void* send, void* recv, int64_t bytes) override {
    if (bytes < 0) return Error("AllGather of " + std::to_string(bytes) + " bytes");
    const auto* s = static_cast<const char*>(send);
    auto* d = static_cast<char*>(recv);
    for (int64_t off = 0; off < bytes; off += MpiChunkBytes()) {
      const int len = static_cast<int>(std::min(MpiChunkBytes(), bytes - off));
      StridedBytes type(len, bytes);
      RETURN_IF_ERROR(MpiStatus(type.rc(), "datatype for AllGather"));
      RETURN_IF_ERROR(
          MpiStatus(MPI_Allgather(s + off, len, MPI_BYTE, d + off, 1, type.type(), MPI_COMM_WORLD),
                    "AllGather of " + std::to_string(bytes) + " bytes per rank"));
    }
    return Status::Ok();
  }

  Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override {
    if (bytes_per_rank < 0)
      return Error("AllToAll of " + std::to_string(bytes_per_rank) + " bytes per rank");
    const auto* s = static_cast<const char*>(send);
    auto* d = static_cast<char*>(recv);
    for (int64_t off = 0; off < bytes_per_rank; off += MpiChunkBytes()) {
      const int len = static_cast<int>(std::min(MpiChunkBytes(), bytes_per_rank - off));
      StridedBytes type(len, bytes_per_rank);
      RETURN_IF_ERROR(MpiStatus(type.rc(), "datatype for AllToAll"));
      RETURN_IF_ERROR(
          MpiStatus(MPI_Alltoall(s + off, 1, type.type(), d + off, 1, type.type(), MPI_COMM_WORLD),
                    "AllToAll of " + std::to_string(bytes_per_rank) + " bytes per rank"));
    }
    return Status::Ok();
  }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    if (root < 0 || root >= size_)
      return Error("Broadcast from rank " + std::to_string(root) + " of a world of " +
                   std::to_string(size_));
    auto* d = static_cast<char*>(data);
    for (int64_t off = 0; off < bytes; off += MpiChunkBytes()) {
      const int len = static_cast<int>(std::min(MpiChunkBytes(), bytes - off));
      RETURN_IF_ERROR(MpiStatus(MPI_Bcast(d + off, len, MPI_BYTE, root, MPI_COMM_WORLD),
                                "Broadcast of " + std::to_string(bytes) + " bytes"));
    }
    return Status::Ok();
  }

  Status Barrier() override { return MpiStatus(MPI_Barrier(MPI_COMM_WORLD), "Barrier"); }

 private:
  int rank_, size_;
};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

StatusOr<Communicator*> MpiWorld() {
  static MpiCommunicator* world = nullptr;
  static Status init_error;
  if (world) return static_cast<Communicator*>(world);
  if (!init_error.ok()) return init_error;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      init_error = MpiStatus(rc, "initialisation (MPI_Init_thread)");
      return init_error;
    }
    std::atexit(FinalizeAtExit);
  }
  Status st = MpiStatus(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                        "MPI_Comm_set_errhandler");
  int rank = 0, size = 1;
  if (st.ok()) st = MpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  if (st.ok()) st = MpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  if (!st.ok()) {
    init_error = st;
    return init_error;
  }
  world = new MpiCommunicator(rank, size);  // lives to the end of the process
  return static_cast<Communicator*>(world);
}

void MpiAbortWorld(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

#endif  // FOUNDRY_MPI

}  // namespace foundry
