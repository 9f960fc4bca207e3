// libFuzzer target: bytes as a safetensors file -> ParseSafetensors (runtime/safetensors.h), the
// reader behind foundry-run --init-from. Any input must end in tensors or one clean error; a
// crash, a sanitizer report, a leak or an empty or multi-line message is a finding. A file that
// parses must also write back to the same tensors (WriteSafetensors, then parse again). Build and
// run with tests/fuzz/build.sh; seeds in tests/fuzz/safetensors_corpus.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/file_util.h"
#include "runtime/safetensors.h"

namespace {

void CheckMessage(const foundry::Status& st, const char* stage) {
  if (st.ok()) return;
  const std::string& m = st.message();
  if (m.empty() || m.find('\n') != std::string::npos || m.size() > 4096) {
    std::fprintf(stderr, "bad error message at %s (%zu bytes): '%.2000s'\n", stage, m.size(),
                 m.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace foundry;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  StatusOr<SafetensorsFile> file = ParseSafetensors(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    CheckMessage(file.status(), "parse");
    return 0;
  }
  // Round trip: what was read writes and reads back to the same tensors and metadata.
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (const auto& [name, t] : file->tensors) tensors.emplace_back(name, &t);
  static const std::string path = "/tmp/safetensors_fuzz." + std::to_string(getpid());
  Status st = WriteSafetensors(path, tensors, file->metadata);
  CheckMessage(st, "write");
  if (!st.ok()) return 0;
  StatusOr<SafetensorsFile> back = ReadSafetensors(path);
  if (!back.ok()) {
    std::fprintf(stderr, "a written file does not read back: %s\n",
                 back.status().message().c_str());
    std::abort();
  }
  bool same = back->metadata == file->metadata && back->tensors.size() == file->tensors.size();
  for (const auto& [name, t] : file->tensors)
    same = same && back->tensors.count(name) &&
           (t.nbytes() ? back->tensors.at(name).BitwiseEqual(t)
                       : back->tensors.at(name).shape() == t.shape() &&
                             back->tensors.at(name).dtype() == t.dtype());
  if (!same) {
    std::fprintf(stderr, "a written file reads back different tensors\n");
    std::abort();
  }
  return 0;
}
