#include "lightning/loggers/tfevents.h"

#include <cstring>

#include "sharded/checkpoint/format/crc32c.h"

namespace shardlight::lightning::loggers {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void Key(std::string& out, int field, int wire_type) { Varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }

template <typename T>
void LittleEndian(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  out.append(bytes, sizeof(T));
}

void Bytes(std::string& out, int field, const std::string& bytes) {
  Key(out, field, kLengthDelimited);
  Varint(out, bytes.size());
  out += bytes;
}

void WallTime(std::string& event, double wall_time) {
  Key(event, 1, kFixed64);
  LittleEndian(event, wall_time);
}

}  // namespace

uint32_t MaskedCrc32c(const std::string& bytes) {
  const uint32_t crc = sharded::checkpoint::Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(const std::string& payload) {
  std::string length;
  LittleEndian(length, static_cast<uint64_t>(payload.size()));
  std::string record = length;
  LittleEndian(record, MaskedCrc32c(length));
  record += payload;
  LittleEndian(record, MaskedCrc32c(payload));
  return record;
}

std::string VersionEvent(double wall_time, const std::string& version) {
  std::string event;
  WallTime(event, wall_time);
  Bytes(event, 3, version);
  return event;
}

std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    Bytes(v, 1, tag);
    Key(v, 2, kFixed32);
    LittleEndian(v, static_cast<float>(value));
    Bytes(summary, 1, v);
  }
  std::string event;
  WallTime(event, wall_time);
  Key(event, 2, kVarint);
  Varint(event, static_cast<uint64_t>(step));
  Bytes(event, 5, summary);
  return event;
}

}  // namespace shardlight::lightning::loggers
