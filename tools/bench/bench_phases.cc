#include "tools/bench/bench_phases.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace shardlight::tools::bench {

int64_t ProcStatus(const char* field) {
  std::ifstream in("/proc/self/status");
  const std::string name(field);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0 && line.size() > name.size() && line[name.size()] == ':') {
      return std::stoll(line.substr(name.size() + 1)) * 1024;
    }
  }
  return -1;
}

bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return static_cast<bool>(out.flush());
}

void DropCache(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double Measure::seconds() const {
  double best = runs.empty() ? 0 : runs[0].seconds;
  for (const Phase& p : runs) best = std::min(best, p.seconds);
  return best;
}

const Phase& Measure::worst_memory() const {
  const Phase* worst = &runs[0];
  for (const Phase& p : runs) {
    if (p.extra() > worst->extra()) worst = &p;
  }
  return *worst;
}

}  // namespace shardlight::tools::bench
