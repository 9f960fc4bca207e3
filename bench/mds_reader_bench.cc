// The MDS reader alone (runtime/mds.h), through the path a training step reads its batch by:
// ReadStepWindows over a DataSource holding the MdsDataset and its MdsOrder (runtime/data.h), as
// foundry-run --data DIR [--shuffle] fills input_ids. For each order (index order, then foundry's
// shuffled order), the split is opened afresh and its windows read twice in that order: cold (every
// shard read for the first time: a zstd shard decompressed and its hash verified, a raw one
// mapped and hashed) and warm (the decompressed shards still held, when they fit the reader's
// cache). The shards' files are wherever the OS has them (just written: in its page cache).
// Usage: mds_reader_bench --data DIR [--seq 2048] [--batch 1] [--vocab 50368]
//          [--shuffle-block 262144] [--seed 9176] [--windows N]
// Prints "key value ..." lines (bench/mds_reader.sh runs it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data.h"
#include "runtime/mds.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

struct Pass {
  double seconds = 0, max_ms = 0, p50_ms = 0;
  int64_t windows = 0;
};

// Windows [0, windows) read `batch` at a time, as consecutive steps read them.
bool ReadAll(const foundry::DataSource& s, int64_t windows, Pass& p) {
  std::vector<int64_t> buf;
  std::vector<double> ms;
  const auto start = Clock::now();
  for (int64_t pos = 0; pos + s.batch <= windows; pos += s.batch) {
    const auto t0 = Clock::now();
    foundry::Status st = foundry::ReadStepWindows(s, 0, pos, buf);
    const auto t1 = Clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "mds_reader_bench: %s\n", st.message().c_str());
      return false;
    }
    ms.push_back(1000 * Seconds(t0, t1));
    p.windows += s.batch;
  }
  p.seconds = Seconds(start, Clock::now());
  if (!ms.empty()) {
    p.max_ms = *std::max_element(ms.begin(), ms.end());
    std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
    p.p50_ms = ms[ms.size() / 2];
  }
  return true;
}

void Print(const std::string& key, const Pass& p, int64_t seq) {
  std::printf(
      "%s_tokens_per_s %.0f windows %lld seconds %.3f step_read_p50_ms %.4f "
      "step_read_max_ms %.3f\n",
      key.c_str(), static_cast<double>(p.windows * seq) / p.seconds,
      static_cast<long long>(p.windows), p.seconds, p.p50_ms, p.max_ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int64_t seq = 2048, batch = 1, vocab = 50368, block = int64_t{1} << 18, windows = -1;
  uint64_t seed = 9176;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--data")
      dir = v;
    else if (k == "--seq")
      seq = std::atoll(v);
    else if (k == "--batch")
      batch = std::atoll(v);
    else if (k == "--vocab")
      vocab = std::atoll(v);
    else if (k == "--shuffle-block")
      block = std::atoll(v);
    else if (k == "--seed")
      seed = std::strtoull(v, nullptr, 10);
    else if (k == "--windows")
      windows = std::atoll(v);
    else {
      std::fprintf(stderr, "mds_reader_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (dir.empty() || seq < 1 || batch < 1 || block < 1) {
    std::fprintf(stderr,
                 "mds_reader_bench: usage: --data DIR [--seq S] [--batch B] [--vocab V] "
                 "[--shuffle-block N] [--seed S] [--windows N]\n");
    return 2;
  }
  for (const bool shuffle : {false, true}) {
    const char* name = shuffle ? "shuffled" : "order";
    const auto t0 = Clock::now();
    auto d = foundry::MdsDataset::Open(dir, "--data " + dir, "int64");
    const auto t1 = Clock::now();
    if (!d.ok()) {
      std::fprintf(stderr, "mds_reader_bench: %s\n", d.status().message().c_str());
      return 1;
    }
    foundry::DataSource s;
    s.tokens_input = "input_ids";
    s.labels_input = "labels";
    s.batch = batch;
    s.seq = seq;
    s.vocab = vocab;
    s.mds = std::shared_ptr<const foundry::MdsDataset>(std::move(d).value());
    s.mds_options.shuffle = shuffle;
    s.mds_options.shuffle_seed = seed;
    s.mds_options.shuffle_block = block;
    foundry::Status st = foundry::SetMdsEpoch(s, batch);
    if (!st.ok()) {
      std::fprintf(stderr, "mds_reader_bench: %s\n", st.message().c_str());
      return 1;
    }
    const int64_t n = windows > 0 ? std::min(windows, s.mds_order->epoch_samples())
                                  : s.mds_order->epoch_samples();
    if (!shuffle)
      std::printf("dataset samples %lld shards %lld format %s\n",
                  static_cast<long long>(s.mds->num_samples()),
                  static_cast<long long>(s.mds->num_shards()), s.mds->DescribeFormat().c_str());
    std::printf("%s_open_s %.4f\n", name, Seconds(t0, t1));
    Pass cold, warm;
    if (!ReadAll(s, n, cold) || !ReadAll(s, n, warm)) return 1;
    Print(std::string(name) + "_cold", cold, seq);
    Print(std::string(name) + "_warm", warm, seq);
  }
  return 0;
}
