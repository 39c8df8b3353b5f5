#include "lightning/loggers/csv_logger.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::loggers {

absl::Status CsvLogger::Open() {
  columns_.clear();
  rows_.clear();
  SL_RETURN_IF_ERROR(file_.Open(path(), "wb"));
  return file_.Append("step\n");
}

std::string CsvLogger::Row(int64_t step, const std::map<std::string, double>& values) const {
  std::string row = absl::StrCat(step);
  for (const std::string& c : columns_) {
    row += ",";
    if (auto it = values.find(c); it != values.end()) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", it->second);
      row += buf;
    }
  }
  return row + "\n";
}

absl::Status CsvLogger::Write(int64_t step, const Scalars& scalars) {
  std::map<std::string, double> values;
  bool wider = false;
  for (const auto& [name, value] : scalars) {
    if (name.empty() || name.find_first_of(",\"\n\r") != std::string::npos || name == "step") {
      return absl::InvalidArgumentError(absl::StrCat("CSV logger: scalar name \"", name,
                                                     "\" is empty, \"step\" or has a comma, quote or newline"));
    }
    values[name] = value;
    if (std::find(columns_.begin(), columns_.end(), name) == columns_.end()) {
      columns_.push_back(name);
      wider = true;
    }
  }
  rows_.emplace_back(step, values);
  if (!wider) return file_.Append(Row(step, values));
  // A new column: the whole file again, under a temporary name, then renamed.
  std::string text = absl::StrCat("step", columns_.empty() ? "" : ",", absl::StrJoin(columns_, ","), "\n");
  for (const auto& [s, v] : rows_) text += Row(s, v);
  const std::string tmp = path() + ".tmp";
  {
    LogFile out;
    SL_RETURN_IF_ERROR(out.Open(tmp, "wb"));
    SL_RETURN_IF_ERROR(out.Append(text));
    SL_RETURN_IF_ERROR(out.Close());
  }
  SL_RETURN_IF_ERROR(file_.Close());
  std::error_code ec;
  std::filesystem::rename(tmp, path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path(), ": ", ec.message()));
  return file_.Open(path(), "ab");
}

}  // namespace shardlight::lightning::loggers
