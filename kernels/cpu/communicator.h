// The communicator interface: the byte-moving collectives that data-parallel training needs, which
// the collective kernels (kernels/cpu/collective.cc, kernels/cuda/collective.cu) call through
// KernelContext::comm and the trainer calls for its own exchanges. It lives with the kernels, the
// lowest layer that calls it; the implementations, one per transport, are the runtime's (MPI on
// host memory: runtime/mpi_communicator.h; NCCL on device memory: runtime/nccl_communicator.h).
// Reductions are never done by the transport (its order is its own): callers exchange bytes, then
// add in rank order themselves.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace foundry {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // "mpi", "nccl"
  // Buffers live in the memory this communicator serves (host: mpi; device: nccl). Every rank
  // calls every collective in the same order with the same sizes.
  // recv[r*bytes, (r+1)*bytes) = rank r's send[0, bytes)
  virtual Status AllGather(const void* send, void* recv, int64_t bytes) = 0;
  // recv[r*bytes, (r+1)*bytes) = rank r's send[rank()*bytes, (rank()+1)*bytes)
  virtual Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) = 0;
  virtual Status Broadcast(void* data, int64_t bytes, int root) = 0;
  virtual Status Barrier() = 0;
};

}  // namespace foundry
