// Cross-rank agreement: the one mechanism by which every collective entry
// point (ShardedTensor, the checkpoint, the Trainer) turns each rank's local
// outcome into one verdict that every rank returns. A rank with bad input or a
// failed local phase thus fails its peers too, with its own error, instead of
// leaving them in the next collective until a timeout.
//
// Each rank brings a Verdict: its status, a fingerprint of what it is about
// to do (ranks must agree on it), and an optional payload gathered to every
// rank. The verdict every rank returns is, in this order:
//   - the lowest failing rank's error: its code, the message
//     "<op> failed on rank R: <message>" (plus how many other ranks failed;
//     AgreedFailingRank reads R back);
//   - InvalidArgument "<op>: ranks disagree on the <subject>: rank 0 and
//     rank R passed different values" when fingerprints differ;
//   - OK, with every rank's payload in rank order.
// If the exchange itself fails (a peer died, a timeout): a rank that had
// failed returns its own error in the form above (it is the root cause), any
// other rank Unavailable naming `op`.
#ifndef SHARDLIGHT_SHARDED_AGREEMENT_H_
#define SHARDLIGHT_SHARDED_AGREEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace shardlight::sharded {

struct Verdict {
  absl::Status status;       // this rank's outcome so far
  uint64_t fingerprint = 0;  // must be equal on every rank; 0 when unused
  std::string payload;       // gathered to every rank when all agree
};

// What an agreement is about, for its messages: `op` names the operation
// ("checkpoint save to '/d'", "gather"), `subject` what the fingerprint covers.
struct AgreementContext {
  std::string op;
  std::string subject = "fingerprint";
};

// Collective: the verdict above, with every rank's payload when it is OK.
absl::StatusOr<std::vector<std::string>> AgreeAndGather(c10d::ProcessGroup& pg, const Verdict& mine,
                                                        const AgreementContext& context);

// Collective: the same verdict, but the payloads reach rank `root` only (the
// others return an empty vector when all agree): for what one rank
// assembles, such as a save's shard records, whose sum grows with the world
// size. No rank but the root holds more than its own payload. Two exchanges:
// the verdicts with each payload's length, then one gather of the bytes; a
// failure of the gather (a peer that died in between) is Unavailable naming
// `op` on the ranks that see it, as a failed exchange above.
absl::StatusOr<std::vector<std::string>> AgreeAndGatherTo(c10d::ProcessGroup& pg, int root, const Verdict& mine,
                                                          const AgreementContext& context);

// The rank an agreed error names as failing: the first "failed on rank R" in
// its message (wrappers keep the text). What a runner of several ranks
// reports first, whichever rank returned first.
std::optional<int> AgreedFailingRank(const absl::Status& status);

// Collective: agreement on success only.
absl::Status Agree(c10d::ProcessGroup& pg, const absl::Status& mine, absl::string_view op);

// Collective: agreement on success and on a fingerprint (or this rank's error).
absl::Status AgreeOn(c10d::ProcessGroup& pg, const absl::StatusOr<uint64_t>& fingerprint,
                     const AgreementContext& context);

}  // namespace shardlight::sharded

#endif  // SHARDLIGHT_SHARDED_AGREEMENT_H_
