#include "lightning/loggers/tensorboard_logger.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "lightning/loggers/tfevents.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning::loggers {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::Status TensorBoardLogger::Open() {
  char host[256] = "localhost";
  (void)::gethostname(host, sizeof(host) - 1);
  const double now = Now();
  SL_RETURN_IF_ERROR(file_.Open(absl::StrCat(dir_, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".",
                                             ::getpid(), ".0"),
                                "wb"));
  return file_.Append(TfRecord(VersionEvent(now)));
}

absl::Status TensorBoardLogger::Write(int64_t step, const Scalars& scalars) {
  return file_.Append(TfRecord(ScalarsEvent(Now(), step, scalars)));
}

}  // namespace shardlight::lightning::loggers
