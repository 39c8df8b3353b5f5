// main() for tests that start servers: it first moves the whole test process
// into a private network namespace with only its own loopback up, so a
// server it starts, and anything that server tries, can reach nothing
// outside this process's loopback. Needs CAP_SYS_ADMIN (root, as in CI);
// without it the tests run on the machine's loopback and say so, the servers
// still bound to 127.0.0.1 only.
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace {

// "" on success, else why not.
std::string EnterPrivateNetworkNamespace() {
  // Before any thread starts: unshare applies to the calling thread only.
  if (unshare(CLONE_NEWNET) != 0) return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  std::string why;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    why = std::string("SIOCGIFFLAGS lo: ") + std::strerror(errno);
  } else {
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) why = std::string("SIOCSIFFLAGS lo up: ") + std::strerror(errno);
  }
  close(fd);
  return why;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string why = EnterPrivateNetworkNamespace();
  if (why.empty()) {
    std::fprintf(stderr, "netns_test_main: in a private network namespace (loopback only)\n");
  } else {
    std::fprintf(stderr, "netns_test_main: on the machine's loopback (no private namespace: %s)\n", why.c_str());
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
