#include "sharded/checkpoint/format/file_names.h"

#include <chrono>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"

namespace shardlight::sharded::checkpoint {

std::string DataFileName(const std::string& generation, int rank) {
  return absl::StrFormat("data-%s-r%05d.safetensors", generation, rank);
}

std::string TempDataFileName(const std::string& generation, int rank) {
  return absl::StrFormat(".tmp-%s-r%05d.safetensors", generation, rank);
}

std::string TempIndexFileName(const std::string& generation) {
  return absl::StrFormat(".tmp-%s-index.json", generation);
}

namespace {

// Consumes "<16 hex digits>" from the front of `text`.
bool ConsumeGeneration(absl::string_view& text) {
  if (text.size() < 16) return false;
  for (char c : text.substr(0, 16)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  text.remove_prefix(16);
  return true;
}

// Whether `text` is "-r<5+ digits>.safetensors".
bool IsRankSuffix(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "-r") || !absl::ConsumeSuffix(&text, ".safetensors") || text.size() < 5) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

bool IsCheckpointFileName(absl::string_view name) {
  // Only names a save itself makes: a stray "data-x.safetensors" of another
  // tool in the same directory is never deleted.
  if (absl::ConsumePrefix(&name, "data-")) return ConsumeGeneration(name) && IsRankSuffix(name);
  if (absl::ConsumePrefix(&name, ".tmp-")) {
    return ConsumeGeneration(name) && (name == "-index.json" || IsRankSuffix(name));
  }
  return false;
}

std::string NewGeneration() {
  std::random_device device;
  const uint64_t clock = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t random = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%016x", clock * 0x9E3779B97F4A7C15ull ^ random);
}

}  // namespace shardlight::sharded::checkpoint
