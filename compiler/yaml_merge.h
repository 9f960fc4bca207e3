// foundry-compile --emit-ckpt-config OUT.yaml --merge-into TRAIN.yaml: the user's llm-foundry
// training YAML with the two keys that set activation checkpointing written in, everything else
// kept as it was, comments included (the file is edited as text, line by line, because yaml-cpp
// keeps no comments), then proven: the result is parsed and compared with the original, node
// by node, and must differ in exactly those two keys.
//
// The keys: model.activation_checkpointing_target (the target as a one-line flow value, or
// removed when checkpointing is off) and fsdp_config.activation_checkpointing (true / false).
// A key already there is replaced in place (its value and any more-indented lines of it); a
// missing one is added at the end of its section; a missing section at the end of the file.
// `model:` and `fsdp_config:` must be block mappings (as llm-foundry writes them); a flow
// mapping (`model: {...}`) or a value on the key line is refused with a line saying to merge by
// hand.
#pragma once

#include <string>

#include "base/status.h"

namespace foundry {

// `target_yaml`: the flow value ("{mptblock: first-3}", "grouped_query_attention"); "" turns
// checkpointing off. `note`: a comment line written above each key set ("set by foundry-compile
// ..."). `path` names the file in errors.
StatusOr<std::string> MergeCkptIntoYaml(const std::string& text, const std::string& path,
                                        const std::string& target_yaml, const std::string& note);

}  // namespace foundry
