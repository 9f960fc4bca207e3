// Region, and the Backend helpers every backend shares (Allocate's checks and message).
#include "runtime/backend.h"

namespace foundry {

Region& Region::operator=(Region&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  backend_ = other.backend_;
  data_ = other.data_;
  bytes_ = other.bytes_;
  class_ = other.class_;
  other.backend_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = 0;
  return *this;
}

void Region::Reset() {
  if (backend_ && data_) backend_->FreeBytes(data_, bytes_, class_);
  backend_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

BackendSpec Backend::Spec() const {
  const Backend* self = this;
  return BackendSpec{std::string(name()), [self](const Graph& graph, const Node& node) {
                       return self->WorkspaceBytes(graph, node);
                     }};
}

StatusOr<Region> Backend::Allocate(int64_t bytes, MemoryClass c, std::string_view what) {
  if (bytes < 0 || bytes > kMaxTensorBytes)
    return Error("cannot allocate " + std::to_string(bytes) + " bytes for " + std::string(what) +
                 " on " + std::string(name()) + ": one region may hold at most " +
                 std::to_string(kMaxTensorBytes) + " (1 TiB)");
  StatusOr<std::byte*> p = AllocateBytes(bytes, c);
  if (!p.ok())
    return p.status().Prepend("cannot allocate " + std::to_string(bytes) + " bytes for " +
                              std::string(what) + " on " + std::string(name()) + ": ");
  Region r;
  r.backend_ = this;
  r.data_ = *p;
  r.bytes_ = bytes;
  r.class_ = c;
  return r;
}

StatusOr<Tensor> Backend::ReadableOnHost(const Tensor& device) {
  if (host_memory())
    return Tensor::View(device.dtype(), device.shape(), const_cast<void*>(device.raw()));
  Tensor host(device.dtype(), device.shape());
  RETURN_IF_ERROR(CopyOut(device, host));
  return host;
}

Tensor Backend::HostStaging(Tensor& device) const {
  if (host_memory()) return Tensor::View(device.dtype(), device.shape(), device.raw());
  return Tensor(device.dtype(), device.shape());
}

}  // namespace foundry
