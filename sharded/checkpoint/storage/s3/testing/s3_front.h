// A front for a test's S3 server: s3_front.py (beside this header) on 127.0.0.1, which
// relays every request to the server unchanged and logs each exchange (so a
// test sees exactly what the server was asked, rank by rank: one front port
// per rank), injects faults (503 SlowDown, 500 InternalError, a dropped
// connection, every Nth matching request), or KILLs the server at an exact
// request. A real server behind it, never a mock.
//
// Start() fails when python3 or the script is missing. The front dies with
// the test (PR_SET_PDEATHSIG); the destructor KILLs it by PID.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_S3_FRONT_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_S3_FRONT_H_

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sharded/checkpoint/storage/s3/s3_config.h"

namespace shardlight::sharded::checkpoint::s3::testing {

struct S3FrontOptions {
  int ports = 1;
  // 'REGEX,KIND,EVERY[,MAX]' (s3_front.py): every EVERY-th request whose
  // "METHOD PATH?QUERY" matches REGEX gets KIND: 503, 500 or drop.
  std::vector<std::string> faults;
  // 'REGEX,N,PID': KILL PID at the N-th matching request (dropped).
  std::vector<std::string> kills;
};

// One exchange the front saw.
struct Exchange {
  int port = 0;
  std::string method, path, query, range, fault;
  int status = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  double t0 = 0, t1 = 0;
  // [first, last] of "bytes=first-last"; {-1, -1} without a Range.
  std::pair<int64_t, int64_t> Range() const;
};

class S3Front {
 public:
  static absl::StatusOr<std::unique_ptr<S3Front>> Start(const std::string& upstream_endpoint,
                                                         S3FrontOptions options = {});
  ~S3Front();

  const std::vector<int>& ports() const { return ports_; }
  // `server` with its endpoint moved to front port `i`.
  S3Config Via(S3Config server, int i = 0) const;
  // Every exchange so far, in the order they ended.
  std::vector<Exchange> Log() const;
  // The most exchanges in flight at once among those `pick` selects.
  template <typename Pick>
  static int MostAtOnce(const std::vector<Exchange>& log, Pick pick);

 private:
  S3Front() = default;
  std::string dir_;
  std::vector<int> ports_;
  pid_t pid_ = -1;
};

template <typename Pick>
int S3Front::MostAtOnce(const std::vector<Exchange>& log, Pick pick) {
  std::vector<std::pair<double, int>> events;
  for (const Exchange& e : log) {
    if (!pick(e)) continue;
    events.push_back({e.t0, 1});
    events.push_back({e.t1, -1});
  }
  std::sort(events.begin(), events.end());  // an end before a start at the same time
  int now = 0, most = 0;
  for (const auto& [t, d] : events) most = std::max(most, now += d);
  return most;
}

}  // namespace shardlight::sharded::checkpoint::s3::testing

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_S3_FRONT_H_
