#include "tools/ckpt/checkpoint_input.h"

#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/interop/open_checkpoint.h"
#include "sharded/checkpoint/format/index.h"
#include "sharded/checkpoint/roots/root_layout.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/checkpoint/storage/posix_file.h"
#include "sharded/status_macros.h"

namespace shardlight::tools::ckpt {

namespace cp = sharded::checkpoint;

namespace {

// What makes a step usable for the tool: its index opens and is valid, and
// every data file it lists opens and holds the entries it says (the blocks'
// checksums are checked by the command itself as it reads them).
absl::Status StepOpens(const std::string& step_dir) {
  SL_ASSIGN_OR_RETURN(auto reader, cp::OpenCheckpointForRead(step_dir));
  return reader.CheckEveryFile();
}

}  // namespace

absl::StatusOr<std::string> ResolveCheckpointInput(const std::string& dir, std::ostream& err) {
  SL_RETURN_IF_ERROR(cp::CheckLocation(dir));
  if (cp::DefaultStorage().Exists(cp::JoinPath(dir, cp::kIndexFileName))) return dir;
  SL_ASSIGN_OR_RETURN(const cp::RootListing listing, cp::ScanCheckpointRoot(dir, cp::DefaultStorage()));
  if (!listing.latest.has_value() && listing.steps.empty()) return dir;  // not a root: the command says what it lacks
  SL_ASSIGN_OR_RETURN(const cp::RootLoadResult resolved, cp::ResolveCheckpointRoot(dir, nullptr, &StepOpens));
  for (const std::string& line : resolved.fallbacks) err << "ckpt: " << line << "\n";
  err << "ckpt: checkpoint root '" << dir << "': using step " << resolved.step << " ('" << resolved.dir << "')\n";
  return resolved.dir;
}

}  // namespace shardlight::tools::ckpt
