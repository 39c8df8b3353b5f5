// TensorBoardLogger: scalars in a TensorBoard event file,
// `<dir>/events.out.tfevents.<unix seconds>.<host>.<pid>.0` (the name
// TensorBoard's directory loader looks for), written by shardlight itself
// (tfevents.h). One event per logged step, flushed at once; the tag is the
// scalar's name ("loss", "lr", "val_loss", "tokens_per_sec"). TensorBoard
// stores simple_value as float: values read back rounded to float.
#ifndef SHARDLIGHT_LIGHTNING_LOGGERS_TENSORBOARD_LOGGER_H_
#define SHARDLIGHT_LIGHTNING_LOGGERS_TENSORBOARD_LOGGER_H_

#include <string>

#include "lightning/loggers/scalar_logger.h"

namespace shardlight::lightning::loggers {

class TensorBoardLogger : public ScalarLogger {
 public:
  explicit TensorBoardLogger(std::string dir) : dir_(std::move(dir)) {}
  std::string kind() const override { return "TensorBoard logger"; }
  const std::string& dir() const override { return dir_; }
  // The event file (empty before Open).
  const std::string& path() const { return file_.path(); }
  absl::Status Open() override;
  absl::Status Write(int64_t step, const Scalars& scalars) override;

 private:
  std::string dir_;
  LogFile file_;
};

}  // namespace shardlight::lightning::loggers

#endif  // SHARDLIGHT_LIGHTNING_LOGGERS_TENSORBOARD_LOGGER_H_
