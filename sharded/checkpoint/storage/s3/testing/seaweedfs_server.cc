#include "sharded/checkpoint/storage/s3/testing/seaweedfs_server.h"

#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sharded/checkpoint/storage/s3/s3_client.h"
#include "seaweedfs/binary.h"

namespace shardlight::sharded::checkpoint::s3::testing {
namespace {

// The ports one `weed mini` listens on, each passed explicitly. The last
// two are a pair: its maintenance worker dials the admin server's gRPC at
// admin.port + 10000 whatever admin.port.grpc says, and a worker that cannot
// connect retries with growing sleeps that TERM then waits out (27 s seen).
constexpr const char* kPortFlags[] = {
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
};
constexpr int kS3PortIndex = 6;
constexpr int kAdminGrpcOffset = 10000;

bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// The lowest port the kernel hands out for outgoing connections and bind(0)
// (net.ipv4.ip_local_port_range; 32768 when unreadable).
int EphemeralLow() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  if (!(range >> low)) low = 32768;
  return low;
}

// Free ports for kPortFlags; the admin gRPC port is the admin port + 10000.
// All below the kernel's ephemeral range where it leaves room (10000 up to
// its start): a port checked free there cannot be taken by an outgoing
// connection before weed binds it -- weed's own parts connect to each other
// from ephemeral ports as they start, and the S3 gateway starts last (seen
// as "bind: address already in use" in a full-suite run). Otherwise (a
// machine with a low ephemeral range) 20000-49999. No two ports 10000 apart
// (weed derives port + 10000).
absl::StatusOr<std::vector<int>> PickPorts() {
  constexpr size_t n = std::size(kPortFlags);
  std::mt19937 rng{std::random_device{}()};
  const int below = EphemeralLow() - 1 - kAdminGrpcOffset;
  std::uniform_int_distribution<int> dist(below >= 15000 ? 10000 : 20000, below >= 15000 ? below : 49999);
  std::vector<int> ports;
  auto taken = [&](int p) {
    for (int q : {p, p + kAdminGrpcOffset, p - kAdminGrpcOffset}) {
      if (std::find(ports.begin(), ports.end(), q) != ports.end()) return true;
    }
    return false;
  };
  for (int tries = 0; ports.size() < n && tries < 10000; ++tries) {
    const int p = dist(rng);
    if (taken(p) || !PortFree(p)) continue;
    if (ports.size() + 2 == n) {  // admin.port: its pair must be free too
      if (taken(p + kAdminGrpcOffset) || !PortFree(p + kAdminGrpcOffset)) continue;
      ports.push_back(p);
      ports.push_back(p + kAdminGrpcOffset);
    } else {
      ports.push_back(p);
    }
  }
  if (ports.size() < n) return absl::ResourceExhaustedError("no free ports on 127.0.0.1 for SeaweedFS");
  return ports;
}

std::vector<std::string> TmpSockets() {
  std::vector<std::string> out;
  glob_t g{};
  if (glob("/tmp/seaweedfs-*.sock", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

}  // namespace

std::string SeaweedFsServer::WeedBinary() { return SHARDLIGHT_SEAWEEDFS_WEED; }

std::string SeaweedFsServer::WhyUnavailable() {
  if (access(WeedBinary().c_str(), X_OK) == 0) return "";
  return absl::StrCat("SeaweedFS ", SHARDLIGHT_SEAWEEDFS_VERSION, " is not installed (no executable ", WeedBinary(),
                      "); `bash tools/setup.sh` installs it (tools/setup_seaweedfs.sh)");
}

absl::StatusOr<std::unique_ptr<SeaweedFsServer>> SeaweedFsServer::Start(SeaweedFsOptions options) {
  if (std::string why = WhyUnavailable(); !why.empty()) return absl::UnavailableError(why);
  std::unique_ptr<SeaweedFsServer> server(new SeaweedFsServer());
  server->options_ = options;
  // A port picked free can be taken before weed binds it: start over, with
  // new ports, a couple of times.
  absl::Status status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    status = server->Launch();
    if (status.ok()) status = server->WaitReady();
    if (status.ok()) return server;
    const std::string log = server->LogTail();
    (void)server->Stop();
    status = absl::Status(status.code(), absl::StrCat(status.message(), "\n--- weed output ---\n", log));
    if (!absl::StrContains(log, "address already in use")) break;
  }
  return status;
}

absl::Status SeaweedFsServer::Launch() {
  // Short, under /tmp: unix socket paths are limited to 107 bytes, which a
  // Bazel test's TEST_TMPDIR can exceed.
  char dir[] = "/tmp/shardlight-s3-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp /tmp: ", std::strerror(errno)));
  dir_ = dir;
  std::filesystem::create_directories(dir_ + "/data");
  std::filesystem::create_directories(dir_ + "/log");
  {
    std::ofstream config(dir_ + "/s3.json");
    config << R"({"identities":[{"name":"tester","credentials":[{"accessKey":")" << options_.access_key
           << R"(","secretKey":")" << options_.secret_key
           << R"("}],"actions":["Admin","Read","Write","List","Tagging"]}]})";
    if (!config) return absl::InternalError(absl::StrCat("cannot write ", dir_, "/s3.json"));
  }
  auto ports = PickPorts();
  if (!ports.ok()) return ports.status();
  ports_ = *ports;
  sockets_before_ = TmpSockets();
  endpoint_ = absl::StrCat("http://127.0.0.1:", ports_[kS3PortIndex]);
  return Spawn();
}

absl::Status SeaweedFsServer::Spawn() {
  std::vector<std::string> args = {
      WeedBinary(),
      absl::StrCat("-logdir=", dir_, "/log"),  // a global flag: before the command
      "mini",
      absl::StrCat("-dir=", dir_, "/data"),
      "-ip=127.0.0.1",
      "-ip.bind=127.0.0.1",
      "-master.telemetry=false",  // never report to the outside address it defaults to
      "-webdav=false",
      "-admin.ui=false",
      "-s3.port.iceberg=0",
      "-s3.port.lance=0",
      // As AWS: a PUT into a missing bucket fails NoSuchBucket.
      "-s3.autoCreateBucket=false",
      absl::StrCat("-s3.config=", dir_, "/s3.json"),
      absl::StrCat("-filer.localSocket=", dir_, "/filer.sock"),
      absl::StrCat("-s3.localSocket=", dir_, "/s3.sock"),
  };
  for (size_t i = 0; i < ports_.size(); ++i) args.push_back(absl::StrCat("-", kPortFlags[i], "=", ports_[i]));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_log = dir_ + "/out.log";

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The server must not outlive the test, however the test ends.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(out_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execv(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status SeaweedFsServer::WaitReady() {
  S3ClientOptions quick;
  quick.max_attempts = 1;
  quick.deadline = absl::Seconds(2);
  quick.connect_timeout = absl::Seconds(1);
  std::unique_ptr<S3Client> client = S3Client::Create(config(), quick);
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  absl::Status last = absl::UnavailableError("not asked yet");
  while (absl::Now() < deadline) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("weed mini exited before it was ready (",
                                              WIFEXITED(wstatus) ? absl::StrCat("exit ", WEXITSTATUS(wstatus))
                                                                 : absl::StrCat("signal ", WTERMSIG(wstatus)),
                                              ")"));
    }
    last = client->ListBuckets().status();
    if (last.ok()) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("weed mini at ", endpoint_, " did not answer a signed ListBuckets ",
                                                  "within ", absl::FormatDuration(options_.ready_timeout),
                                                  "; last: ", last.message()));
}

SeaweedFsServer::~SeaweedFsServer() { (void)Stop(); }

void SeaweedFsServer::RemoveOurSockets() {
  for (const std::string& s : TmpSockets()) {
    if (std::find(sockets_before_.begin(), sockets_before_.end(), s) != sockets_before_.end()) continue;
    for (int port : ports_) {
      if (absl::EndsWith(s, absl::StrCat("-", port, ".sock"))) std::remove(s.c_str());
    }
  }
}

absl::Status SeaweedFsServer::Crash() {
  if (pid_ <= 0) return absl::FailedPreconditionError("weed mini is not running");
  kill(pid_, SIGKILL);
  if (waitpid(pid_, nullptr, 0) != pid_) {
    return absl::InternalError(absl::StrCat("waiting for weed mini (pid ", pid_, ") after KILL: ", std::strerror(errno)));
  }
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status SeaweedFsServer::Restart() {
  if (pid_ > 0) return absl::FailedPreconditionError("weed mini is still running");
  if (dir_.empty()) return absl::FailedPreconditionError("the server was stopped: its data is gone");
  // The unix sockets the killed process left would stop the new one binding.
  RemoveOurSockets();
  std::remove((dir_ + "/filer.sock").c_str());
  std::remove((dir_ + "/s3.sock").c_str());
  const absl::Status spawned = Spawn();
  return spawned.ok() ? WaitReady() : spawned;
}

absl::Status SeaweedFsServer::Stop() {
  absl::Status status;
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + options_.stop_timeout;
    bool exited = false;
    while (!exited && absl::Now() < deadline) {
      exited = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!exited) absl::SleepFor(absl::Milliseconds(50));
    }
    if (!exited) {
      // Seen: its volume server's graceful HTTP shutdown waiting ~28 s on a
      // connection. The data is the test's to throw away: KILL is fine,
      // and said.
      std::fprintf(stderr, "weed mini (pid %d) still running %s after TERM: KILL\n", pid_,
                   absl::FormatDuration(options_.stop_timeout).c_str());
      kill(pid_, SIGKILL);
      if (waitpid(pid_, nullptr, 0) != pid_) {
        status = absl::InternalError(absl::StrCat("weed mini (pid ", pid_, ") survived KILL: ", std::strerror(errno)));
      }
    }
    pid_ = -1;
  }
  // Its grpc sockets are named by port in /tmp; remove only ours, new ones.
  RemoveOurSockets();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }
  return status;
}

S3Config SeaweedFsServer::config() const {
  S3Config c;
  c.credentials.access_key_id = options_.access_key;
  c.credentials.secret_access_key = options_.secret_key;
  c.region = "us-east-1";
  c.endpoint_url = endpoint_;
  return c;
}

std::string SeaweedFsServer::LogTail() const {
  std::ifstream in(dir_ + "/out.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

}  // namespace shardlight::sharded::checkpoint::s3::testing
