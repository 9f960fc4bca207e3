// Byte counts as the reports and messages write them: the one formatter of the tree.
#pragma once

#include <cstdint>
#include <string>

namespace foundry {

// "512 B", "49.2 KiB", "1.50 MiB": below 1 KiB the whole bytes; else the largest binary unit
// (KiB, MiB, GiB, TiB, PiB) the count reaches, with `decimals` digits after the point (the
// module tree and the messages 1, the memory line 2).
std::string HumanBytes(int64_t bytes, int decimals = 1);

// "0.37 MiB": always in MiB, with `decimals` digits (log lines that scripts read, such as the
// schedule's).
std::string InMiB(int64_t bytes, int decimals = 2);

}  // namespace foundry
