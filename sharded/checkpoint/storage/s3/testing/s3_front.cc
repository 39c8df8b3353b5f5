#include "sharded/checkpoint/storage/s3/testing/s3_front.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace shardlight::sharded::checkpoint::s3::testing {
namespace {

// Where bazel put sharded/checkpoint/storage/s3/testing/s3_front.py for this test.
std::string ScriptPath() {
  for (const char* root : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    const char* dir = std::getenv(root);
    if (dir == nullptr) continue;
    const char* ws = std::getenv("TEST_WORKSPACE");
    const std::string path =
        absl::StrCat(dir, "/", ws ? ws : "shardlight", "/sharded/checkpoint/storage/s3/testing/s3_front.py");
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return "sharded/checkpoint/storage/s3/testing/s3_front.py";
}

// The JSON value after "key": in one flat log line, unquoted.
std::string Field(const std::string& line, const std::string& key) {
  const std::string tag = absl::StrCat("\"", key, "\": ");
  size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  if (line[at] == '"') {
    std::string out;
    for (size_t i = at + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out += line[i];
    }
    return out;
  }
  const size_t end = line.find_first_of(",}", at);
  return line.substr(at, end - at);
}

}  // namespace

std::pair<int64_t, int64_t> Exchange::Range() const {
  int64_t first = -1, last = -1;
  const std::string prefix = "bytes=";
  if (range.rfind(prefix, 0) != 0) return {-1, -1};
  std::vector<std::string> parts = absl::StrSplit(range.substr(prefix.size()), '-');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) || !absl::SimpleAtoi(parts[1], &last)) return {-1, -1};
  return {first, last};
}

absl::StatusOr<std::unique_ptr<S3Front>> S3Front::Start(const std::string& upstream_endpoint,
                                                          S3FrontOptions options) {
  std::unique_ptr<S3Front> front(new S3Front());
  char tmpl[] = "/tmp/s3front-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  front->dir_ = tmpl;
  const std::string ready = front->dir_ + "/ports";
  std::vector<std::string> args = {"python3",  ScriptPath(), "--upstream", upstream_endpoint, "--ports",
                                   absl::StrCat(options.ports), "--ready", ready, "--log", front->dir_ + "/log"};
  for (const std::string& f : options.faults) args.insert(args.end(), {"--fault", f});
  for (const std::string& k : options.kills) args.insert(args.end(), {"--kill", k});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = front->dir_ + "/out.log";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    FILE* f = std::freopen(out.c_str(), "w", stderr);
    (void)f;
    execvp(argv[0], argv.data());
    _exit(127);
  }
  front->pid_ = pid;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    std::ifstream in(ready);
    if (in) {
      int port;
      while (in >> port) front->ports_.push_back(port);
      if (static_cast<int>(front->ports_.size()) == options.ports) return front;
      front->ports_.clear();
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      front->pid_ = -1;
      std::ifstream log(out);
      std::stringstream text;
      text << log.rdbuf();
      return absl::InternalError(absl::StrCat("s3_front.py exited before listening: ", text.str()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError("s3_front.py did not listen within 20 s");
}

S3Front::~S3Front() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

S3Config S3Front::Via(S3Config server, int i) const {
  server.endpoint_url = absl::StrCat("http://127.0.0.1:", ports_.at(static_cast<size_t>(i)));
  return server;
}

std::vector<Exchange> S3Front::Log() const {
  std::vector<Exchange> out;
  std::ifstream in(dir_ + "/log");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.back() != '}') continue;  // a line being written
    Exchange e;
    (void)absl::SimpleAtoi(Field(line, "port"), &e.port);
    e.method = Field(line, "method");
    e.path = Field(line, "path");
    e.query = Field(line, "query");
    e.range = Field(line, "range");
    e.fault = Field(line, "fault");
    (void)absl::SimpleAtoi(Field(line, "status"), &e.status);
    (void)absl::SimpleAtoi(Field(line, "in"), &e.bytes_in);
    (void)absl::SimpleAtoi(Field(line, "out"), &e.bytes_out);
    (void)absl::SimpleAtod(Field(line, "t0"), &e.t0);
    (void)absl::SimpleAtod(Field(line, "t1"), &e.t1);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace shardlight::sharded::checkpoint::s3::testing
