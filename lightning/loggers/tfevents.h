// The TensorBoard event-file format, written without protobuf or TensorFlow:
// a file of TFRecords (uint64 length, masked CRC32C of the length, the bytes,
// masked CRC32C of the bytes; little-endian), each holding one serialized
// tensorflow.Event. Only what scalars need is encoded:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record of a file is the version event ("brain.Event:2").
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_TFEVENTS_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_TFEVENTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardlight::lightning::loggers {

// TFRecord's checksum: CRC32C rotated right by 15 bits plus 0xa282ead8.
uint32_t MaskedCrc32c(const std::string& bytes);

// `payload` framed as one TFRecord.
std::string TfRecord(const std::string& payload);

// A serialized Event carrying file_version.
std::string VersionEvent(double wall_time, const std::string& version = "brain.Event:2");

// A serialized Event with a Summary of simple_value scalars (stored as float).
std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_TFEVENTS_H_
