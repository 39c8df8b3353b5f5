// TorchVersion: a PyTorch version string ("1.13.0", "1.10.0a0+ecc3718",
// "1.10.0.dev20210809", "2.1.0+cu121") parsed and ordered by PEP 440.
//
// It exists to *explain* a build, never to gate a feature: pre-releases and
// local builds such as NGC's "1.10.0a0+ecc3718" pass naive version checks while
// lacking what the version number promises (see feature_gate.h).
//
// Accepted form (PEP 440 public version plus local label, canonical spelling):
//   [N!]N(.N)*[{a|b|rc}N][.postN][.devN][+LOCAL]
// where LOCAL is alphanumeric segments joined by '.', '-' or '_'.
// ParseTorchVersion returns InvalidArgument, quoting the input and saying what
// is wrong, for anything else ("", "1..2", "abc", "1.13.0+", "1.x").
#ifndef SHARDLIGHT_LIGHTNING_GATE_TORCH_VERSION_H_
#define SHARDLIGHT_LIGHTNING_GATE_TORCH_VERSION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardlight::lightning {

class TorchVersion {
 public:
  enum class PreKind { kAlpha, kBeta, kRc };  // spelled a, b, rc; ordered a < b < rc
  struct PreRelease {
    PreKind kind;
    int64_t number;
  };

  int64_t epoch() const { return epoch_; }
  const std::vector<int64_t>& release() const { return release_; }
  // Release segment i, or 0 past the end ("1.13" has micro 0).
  int64_t Segment(size_t i) const { return i < release_.size() ? release_[i] : 0; }
  int64_t Major() const { return Segment(0); }
  int64_t Minor() const { return Segment(1); }
  int64_t Micro() const { return Segment(2); }
  const std::optional<PreRelease>& pre() const { return pre_; }
  const std::optional<int64_t>& post() const { return post_; }
  const std::optional<int64_t>& dev() const { return dev_; }
  // The local label without '+', segments joined by '.'; empty when absent.
  std::string Local() const;

  // PEP 440: a version with a pre-release or dev segment is a pre-release.
  bool IsPreRelease() const { return pre_.has_value() || dev_.has_value(); }
  bool IsDevRelease() const { return dev_.has_value(); }
  bool HasLocal() const { return !local_.empty(); }
  // The release alone ("1.10.0a0+ecc3718" -> "1.10.0"), PEP 440's base_version.
  TorchVersion BaseVersion() const;

  // Canonical spelling; ParseTorchVersion(v.ToString()) == v.
  std::string ToString() const;

  // PEP 440 ordering: epoch, release (trailing zeros ignored), then
  // .devN < aN < bN < rcN < final < .postN, then no local < any local label
  // (numeric segments compare as numbers and sort after alphanumeric ones).
  friend int Compare(const TorchVersion& a, const TorchVersion& b);
  friend bool operator==(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) == 0; }
  friend bool operator!=(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) != 0; }
  friend bool operator<(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) < 0; }
  friend bool operator<=(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) <= 0; }
  friend bool operator>(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) > 0; }
  friend bool operator>=(const TorchVersion& a, const TorchVersion& b) { return Compare(a, b) >= 0; }

 private:
  friend absl::StatusOr<TorchVersion> ParseTorchVersion(absl::string_view text);

  int64_t epoch_ = 0;
  std::vector<int64_t> release_;
  std::optional<PreRelease> pre_;
  std::optional<int64_t> post_;
  std::optional<int64_t> dev_;
  std::vector<std::string> local_;  // lower-cased; PEP 440 compares them case-insensitively
};

absl::StatusOr<TorchVersion> ParseTorchVersion(absl::string_view text);

}  // namespace shardlight::lightning

#endif  // SHARDLIGHT_LIGHTNING_GATE_TORCH_VERSION_H_
