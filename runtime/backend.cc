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
  std::byte* p = AllocateBytes(bytes, c);
  if (!p)
    return Error("cannot allocate " + std::to_string(bytes) + " bytes for " + std::string(what) +
                 " on " + std::string(name()) + ": out of memory");
  Region r;
  r.backend_ = this;
  r.data_ = p;
  r.bytes_ = bytes;
  r.class_ = c;
  return r;
}

}  // namespace foundry
