// ScalarLogger: where LoggerCallback writes named scalars per step (loss,
// lr, validation metrics, throughput). Implementations: CsvLogger
// (csv_logger.h) and TensorBoardLogger (tensorboard_logger.h). Only rank 0
// opens and writes; every rank checks the directory (CheckLogDir) before
// training, so a bad directory fails every rank with the same error.
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_SCALAR_LOGGER_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_SCALAR_LOGGER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace shardlight::lightning::loggers {

using Scalars = std::vector<std::pair<std::string, double>>;

class ScalarLogger {
 public:
  virtual ~ScalarLogger() = default;
  // "CSV logger", "TensorBoard logger": for messages.
  virtual std::string kind() const = 0;
  virtual const std::string& dir() const = 0;
  // Creates the directory and the logger's file (rank 0, before training).
  // An error names the file.
  virtual absl::Status Open() = 0;
  // Appends one step's scalars and flushes them to the file (a write error --
  // disk full -- is returned naming the file).
  virtual absl::Status Write(int64_t step, const Scalars& scalars) = 0;
};

// Creates `dir` if missing and checks that it is a directory where a file
// can be created (a probe file, removed at once: this holds for root too).
// InvalidArgument naming `dir` and `option` ("log directory /x of the CSV
// logger: it is a file, not a directory") otherwise. `probe_id` tells apart
// the probes of ranks that check at once.
absl::Status CheckLogDir(const std::string& dir, const std::string& option, int probe_id);

// A file that reports write errors with its path (fwrite + fflush; errno).
class LogFile {
 public:
  LogFile() = default;
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;
  // `mode`: "wb" or "ab". Creates the parent directory first.
  absl::Status Open(const std::string& path, const char* mode);
  absl::Status Append(const std::string& bytes);
  absl::Status Close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_SCALAR_LOGGER_H_
