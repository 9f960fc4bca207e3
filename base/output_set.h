// The files one command writes, as one unit: every output is named before any work is done and
// checked then, its bytes go to a temporary beside it, and all of them are renamed into place
// together at the end, or, on any failure, none.
//
//   1. Add*: each input and output as the command line names it. Checked at once, against every
//      other: an empty name, a file name longer than the file system takes, a folder where a file
//      goes (or a file where a folder goes), an output that is another output or an input (by file
//      identity where the file exists, by the canonical path where it does not), a file output
//      inside a folder output or an input folder.
//   2. Stage / Write: the bytes go to DIR/.foundry-tmp.<pid>.<n>/<name> beside the target (same
//      file system, so the rename cannot fail for crossing one), a temp folder this set holds a
//      flock on until it is gone (RemoveStagingDebris tells a live one from a dead run's by it).
//      Missing folders above a target are made here and remembered.
//   3. Commit: under an exclusive lock (flock) on every target folder, so two commands writing
//      the same outputs never interleave their renames: the direct outputs first (a character
//      device or a FIFO, such as /dev/null, /dev/stdout or a named pipe, is written to, never
//      renamed over: nothing else can be undone, so a failure there still leaves every other
//      output as it was), then each staged file or folder renamed over its target, the old one
//      kept by a hard link (a folder: moved aside) until all are in, and put back if a later
//      rename fails.
//   4. Abort (also on destruction without Commit): temporaries and the folders made for them
//      are removed; the targets were never touched.
// Only a crash inside step 3 can leave a mixed set; the old files then sit in the temp folders.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace foundry {

class OutputSet {
 public:
  OutputSet() = default;
  ~OutputSet() { Abort(); }
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // `what` names the input in messages ("the model, an input of this command"). A folder input (a
  // --resume save) holds its files: no output may lie inside it. An input that does not exist is
  // ignored (its reader reports it).
  Status AddInput(const std::string& path, const std::string& what);

  // `option` names the output in messages ("--report-json", "-o"). `special`: a character device
  // or FIFO that exists at `path` is written directly (else refused: a plan pair, a save).
  // `make_parents`: missing folders above the file are made at staging (else the folder must
  // exist).
  struct FileOptions {
    bool special = true;
    bool make_parents = false;
  };
  Status AddFile(const std::string& path, const std::string& option, FileOptions options);
  Status AddFile(const std::string& path, const std::string& option) {
    return AddFile(path, option, FileOptions{});
  }
  // A folder replaced whole (a --save): an existing one is swapped out and removed at commit.
  Status AddFolder(const std::string& path, const std::string& option);

  bool Has(const std::string& path) const { return Find(path) != nullptr; }

  // Where to write the output `path` (as given to Add*): a fresh file path (a folder, made, for
  // AddFolder) in the temp folder beside it; the same name as the target, so files that name each
  // other (a graph and its .data) can be staged side by side. Not for a direct output.
  StatusOr<std::string> Stage(const std::string& path);
  // Stages `bytes` as the content of `path` (a direct output keeps them for the commit).
  Status Write(const std::string& path, std::string_view bytes);
  Status Write(const std::string& path, const std::function<bool(std::FILE*)>& write);

  // Steps 3-4. Outputs never staged are left alone. After a failure nothing was changed (but a
  // direct output may hold part of its bytes).
  Status Commit();
  void Abort();

 private:
  struct Entry {
    std::string path, option;
    std::string target;  // where the rename goes: `path`, or what a symlink there points to
    int fd = -1;         // /dev/stdout, /dev/stderr (and their /dev/fd, /proc/self/fd names)
    bool folder = false, direct = false, make_parents = false;
    std::string canonical;  // weakly_canonical(path)
    std::string staged;     // "" until staged
    std::string bytes;      // a direct output's content
    bool staged_direct = false;
  };
  struct Input {
    std::string path, what, canonical;
    bool folder = false;
  };
  const Entry* Find(const std::string& path) const;
  Entry* Find(const std::string& path);
  Status Check(const std::string& path, const std::string& option, bool folder,
               std::string& canonical) const;
  StatusOr<std::string> StagingFolder(const std::string& target_dir, const Entry& e);
  void ReleaseStagingLocks();

  std::vector<Input> inputs_;
  std::vector<Entry> outputs_;
  std::vector<std::pair<std::string, std::string>> staging_;  // target folder -> temp folder
  std::vector<int> staging_locks_;  // an open descriptor of each temp folder, flock'ed
  std::vector<std::string> made_folders_;                     // outermost first
};

// The temp folders (.foundry-tmp.<pid>.<n>) in `folder` that no live command owns, removed: nobody
// holds their flock, and their pid is not running (or is this process's: an earlier process of
// the same pid, as in a container), or they were last changed before `stale_before` (a dead
// run's whose pid another process has taken since). Returns one line per folder removed ("X
// (pid 123, not running)") or that could not be ("cannot remove X: why"). Also the empty folder
// (.foundry-probe.<pid>) a process killed while testing that it may write here left.
std::vector<std::string> RemoveStagingDebris(
    const std::string& folder,
    std::optional<std::filesystem::file_time_type> stale_before = std::nullopt);

// The folders of `path` that do not exist, outermost first ("a/b/c" with only "a": a/b, a/b/c).
std::vector<std::string> MissingFolders(const std::string& path);

}  // namespace foundry
