#include "runtime/checkpoint_manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "base/crc32c.h"
#include "base/file_util.h"
#include "base/quote.h"

namespace foundry {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "foundry-checkpoint-manifest";
constexpr int64_t kMaxManifestBytes = 64 << 20;

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The regular files below `dir`, relative, '/'-separated, sorted.
StatusOr<std::vector<std::string>> FilesBelow(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->is_regular_file(ignored))
      files.push_back(fs::relative(it->path(), dir, ignored).generic_string());
  }
  if (ec) return Error("cannot list " + QuoteName(dir) + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

struct Listed {
  int64_t bytes = 0;
  std::string crc32c;
};

// The manifest of `dir`: path -> size and checksum.
StatusOr<std::map<std::string, Listed>> ReadManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Error("it has no " + std::string(kManifestFile) +
                 ": a save by a foundry-run older than checksummed saves, or not a complete "
                 "save; its bytes cannot be verified, so it is refused (resume it with the "
                 "foundry-run that wrote it and --save it again)");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxManifestBytes));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string bad = QuoteName(path) + " is damaged or not a foundry manifest";
  if (!j.is_object() || j.value("format", "") != kFormat || !j.contains("files") ||
      !j["files"].is_array())
    return Error(bad);
  std::map<std::string, Listed> listed;
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_integer() || !f.contains("crc32c") || !f["crc32c"].is_string())
      return Error(bad);
    listed[f["path"].get<std::string>()] = {f["bytes"].get<int64_t>(),
                                            f["crc32c"].get<std::string>()};
  }
  return listed;
}

Status CheckFile(const std::string& dir, const std::string& name, const Listed& want) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    return Error(QuoteName(path) + ", listed in its " + kManifestFile +
                 ", is missing; the save is incomplete");
  ASSIGN_OR_RETURN(FileChecksum sum, ChecksumFile(path));
  if (sum.bytes != want.bytes)
    return Error(QuoteName(path) + " is damaged: " + std::to_string(sum.bytes) + " bytes, its " +
                 kManifestFile + " says " + std::to_string(want.bytes));
  if (Hex(sum.crc32c) != want.crc32c)
    return Error(QuoteName(path) + " is damaged: its CRC-32C is " + Hex(sum.crc32c) + ", its " +
                 kManifestFile + " says " + want.crc32c);
  return Status::Ok();
}

// The saves this process verified, by their manifest's device, inode, size and modification time.
using ManifestId = std::tuple<uint64_t, uint64_t, int64_t, int64_t, int64_t>;
std::mutex verified_mutex;
std::set<ManifestId> verified;

std::optional<ManifestId> IdOfManifest(const std::string& dir) {
  struct stat st {};
  if (::stat((fs::path(dir) / kManifestFile).c_str(), &st) != 0) return std::nullopt;
  return ManifestId{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

}  // namespace

Status WriteCheckpointManifest(const std::string& folder) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, FilesBelow(folder));
  // One file a line, so that a diff of two manifests reads as the files that differ.
  std::string text = "{\"format\": \"" + std::string(kFormat) + "\", \"version\": 1, \"files\": [";
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& name = files[i];
    if (name == kManifestFile) return Error(QuoteName(folder) + " already has a manifest");
    ASSIGN_OR_RETURN(FileChecksum sum, ChecksumFile((fs::path(folder) / name).string()));
    nlohmann::ordered_json f = {{"path", name}, {"bytes", sum.bytes}, {"crc32c", Hex(sum.crc32c)}};
    text += (i ? ",\n  " : "\n  ") +
            f.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  text += "\n]}\n";
  return WriteFileAtomic((fs::path(folder) / kManifestFile).string(), text);
}

Status VerifyCheckpoint(const std::string& dir) {
  const std::optional<ManifestId> id = IdOfManifest(dir);
  if (id) {
    std::lock_guard<std::mutex> lock(verified_mutex);
    if (verified.count(*id)) return Status::Ok();
  }
  ASSIGN_OR_RETURN(auto listed, ReadManifest(dir));
  ASSIGN_OR_RETURN(std::vector<std::string> files, FilesBelow(dir));
  for (const std::string& name : files)
    if (name != kManifestFile && !listed.count(name))
      return Error(QuoteName((fs::path(dir) / name).string()) + " is not listed in its " +
                   kManifestFile + ": the save was changed after it was written");
  for (const auto& [name, want] : listed) RETURN_IF_ERROR(CheckFile(dir, name, want));
  if (id && IdOfManifest(dir) == id) {
    std::lock_guard<std::mutex> lock(verified_mutex);
    verified.insert(*id);
  }
  return Status::Ok();
}

StatusOr<TrainState> ReadVerifiedTrainState(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kManifestFile, ec) || fs::exists(fs::path(dir) / "state.json", ec))
    RETURN_IF_ERROR(VerifyCheckpoint(dir).Prepend("--resume " + dir + ": "));
  return ReadTrainState(dir);
}

Status VerifyFileIfInCheckpoint(const std::string& file) {
  const fs::path dir = fs::path(file).parent_path().empty() ? fs::path(".")
                                                            : fs::path(file).parent_path();
  std::error_code ec;
  if (!fs::exists(dir / kManifestFile, ec)) return Status::Ok();
  ASSIGN_OR_RETURN(auto listed, ReadManifest(dir.string()));
  auto it = listed.find(fs::path(file).filename().string());
  if (it == listed.end())
    return Error(QuoteName(file) + " is not listed in the " + kManifestFile +
                 " beside it: the save was changed after it was written");
  return CheckFile(dir.string(), it->first, it->second);
}

}  // namespace foundry
