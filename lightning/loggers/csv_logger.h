// CsvLogger: `<dir>/metrics.csv`, one row per logged step, as Lightning's
// CSVLogger: a header "step,<name>,..." (names in the order first logged),
// then one row per step, an empty cell where a step did not log a name.
// Values with 17 significant digits (a double reads back exactly). A name
// seen for the first time rewrites the file with the wider header (through a
// temporary file and a rename, so the file is never half-written); other
// steps append. Not thread-safe; rank 0 only (LoggerCallback).
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_CSV_LOGGER_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_CSV_LOGGER_H_

#include <map>
#include <string>
#include <vector>

#include "lightning/loggers/scalar_logger.h"

namespace shardlight::lightning::loggers {

class CsvLogger : public ScalarLogger {
 public:
  explicit CsvLogger(std::string dir) : dir_(std::move(dir)) {}
  std::string kind() const override { return "CSV logger"; }
  const std::string& dir() const override { return dir_; }
  std::string path() const { return dir_ + "/metrics.csv"; }
  absl::Status Open() override;
  // InvalidArgument for a name with a comma, quote or newline.
  absl::Status Write(int64_t step, const Scalars& scalars) override;

 private:
  std::string Row(int64_t step, const std::map<std::string, double>& values) const;
  std::string dir_;
  std::vector<std::string> columns_;
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows_;
  LogFile file_;
};

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_CSV_LOGGER_H_
