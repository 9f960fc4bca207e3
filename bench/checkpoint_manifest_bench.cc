// What a checkpoint's manifest costs: CRC-32C over memory (base/crc32c.h), and
// WriteCheckpointManifest / VerifyCheckpoint (runtime/checkpoint_manifest.h) over a folder laid
// out like a save (model.onnx, model.safetensors, state.json, optimizer/<param>.m.pb and .v.pb)
// of the given size, its files just written (in the page cache, as after a save).
// Usage: checkpoint_manifest_bench --gib G --repeats R   (bench/checkpoint_manifest.sh runs it)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "runtime/checkpoint_manifest.h"

namespace fs = std::filesystem;

namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void WriteFile(const fs::path& p, size_t bytes, unsigned seed) {
  std::vector<char> block(1 << 20);
  for (size_t i = 0; i < block.size(); ++i)
    block[i] = static_cast<char>((i * 2654435761u + seed) >> 13);
  std::ofstream out(p, std::ios::binary);
  for (size_t done = 0; done < bytes; done += block.size())
    out.write(block.data(), static_cast<std::streamsize>(std::min(block.size(), bytes - done)));
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gib"))
      gib = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
  }
  if (gib <= 0 || repeats < 1) {
    std::fprintf(stderr, "checkpoint_manifest_bench: usage: --gib G (> 0) --repeats R (>= 1)\n");
    return 2;
  }
  // Memory: 256 MiB, repeated.
  std::vector<unsigned char> buf(256 << 20);
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  double best = 1e30;
  uint32_t crc = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    crc = foundry::Crc32c(0, buf.data(), buf.size());
    best = std::min(best, Seconds(t0));
  }
  std::printf("crc32c_memory_gbps %.2f (crc %08x)\n", buf.size() / best / 1e9, crc);

  // A save's layout: the weights twice (model.onnx, model.safetensors: a quarter each of the
  // total), AdamW's two slots (half), 64 parameters.
  const fs::path dir =
      fs::temp_directory_path() / ("foundry_manifest_bench." + std::to_string(::getpid()));
  fs::create_directories(dir / "optimizer");
  const size_t total = static_cast<size_t>(gib * (1ull << 30));
  const int params = 64;
  WriteFile(dir / "model.onnx", total / 4, 1);
  WriteFile(dir / "model.safetensors", total / 4, 2);
  WriteFile(dir / "state.json", 600, 3);
  for (int p = 0; p < params; ++p) {
    WriteFile(dir / "optimizer" / ("p" + std::to_string(p) + ".m.pb"), total / 4 / params, 4 + p);
    WriteFile(dir / "optimizer" / ("p" + std::to_string(p) + ".v.pb"), total / 4 / params, 100 + p);
  }
  // Each repeat writes a new manifest (a new file: VerifyCheckpoint, which remembers the saves it
  // verified for the life of the process, reads the whole save again), then verifies it.
  double write_best = 1e30, verify_best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    fs::remove(dir / "manifest.json");
    auto t0 = std::chrono::steady_clock::now();
    foundry::Status st = foundry::WriteCheckpointManifest(dir.string());
    write_best = std::min(write_best, Seconds(t0));
    if (st.ok()) {
      t0 = std::chrono::steady_clock::now();
      st = foundry::VerifyCheckpoint(dir.string());
      verify_best = std::min(verify_best, Seconds(t0));
    }
    if (!st.ok()) {
      std::fprintf(stderr, "checkpoint_manifest_bench: %s\n", st.message().c_str());
      fs::remove_all(dir);
      return 1;
    }
  }
  const double bytes = static_cast<double>(total);
  std::printf("save_gib %.2f files %d\n", bytes / (1ull << 30), 3 + 2 * params);
  std::printf("write_manifest_s %.3f (%.2f GB/s)\n", write_best, bytes / write_best / 1e9);
  std::printf("verify_s %.3f (%.2f GB/s)\n", verify_best, bytes / verify_best / 1e9);
  fs::remove_all(dir);
  return 0;
}
