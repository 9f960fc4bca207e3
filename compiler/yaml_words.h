// Words for YAML values in the messages of the config readers (ckpt_targets.cc: --ckpt-config;
// train_config.cc: --config): one spelling for both.
#pragma once

#include <string>

namespace YAML {
class Node;
}

namespace foundry {

// A scalar written without quotes (YAML plain style): only those can be ints or bools.
bool IsPlainYaml(const YAML::Node& n);

// What a value is, for "key 'k' is <this>; expected ...": "null", "a list", "a mapping", or the
// scalar in quotes (escaped and clipped).
std::string YamlKindOf(const YAML::Node& n);

}  // namespace foundry
