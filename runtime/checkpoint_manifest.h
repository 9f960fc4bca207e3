// manifest.json: what a save (Trainer::Save, runtime/train_state.h's layout) holds, written last
// into the save's temp folder, so a save folder in place always has one: every other file below
// the folder with its size and CRC-32C (base/crc32c.h).
//
//   {"format": "foundry-checkpoint-manifest", "version": 1,
//    "files": [{"path": "model.onnx", "bytes": 1234, "crc32c": "e3069283"}, ...]}
//
// A save is trusted only as a whole: VerifyCheckpoint refuses one without a manifest (written
// before foundry checksummed its saves, or not a complete save), a file missing, damaged
// (another size or checksum) or not listed. Paths are relative, '/'-separated, sorted.
#pragma once

#include <string>

#include "base/status.h"
#include "runtime/train_state.h"

namespace foundry {

inline constexpr char kManifestFile[] = "manifest.json";

// Lists every regular file below `folder` (none may be manifest.json) and writes the manifest
// there atomically.
Status WriteCheckpointManifest(const std::string& folder);

// Every file of the save in `dir` checked against its manifest; an error is one line naming the
// file (without a prefix: the caller adds "--resume DIR: "). A save that verified is remembered
// for the life of the process (by its manifest's identity, size and time): the readers that
// follow (the options a resume takes, the step it reached, the weights) do not read it again.
Status VerifyCheckpoint(const std::string& dir);

// The state.json of the save in `dir`, after VerifyCheckpoint: what every reader of a save's
// state goes through. A folder with neither a manifest nor a state.json is not a save at all,
// which ReadTrainState's message says.
StatusOr<TrainState> ReadVerifiedTrainState(const std::string& dir);

// `file` checked against the manifest of its folder when that folder has one (a save's
// model.safetensors given to --init-from); a file elsewhere (PyTorch's) is not checked.
Status VerifyFileIfInCheckpoint(const std::string& file);

}  // namespace foundry
