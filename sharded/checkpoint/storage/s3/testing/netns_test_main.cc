// main() for tests that start servers: it first moves the whole test process
// into a private network namespace with only its own loopback up, so a
// server it starts, and anything that server tries, can reach nothing
// outside this process's loopback. Needs CAP_SYS_ADMIN (root, as in CI);
// without it the tests run on the machine's loopback and say so, the servers
// still bound to 127.0.0.1 only.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace {

// "" on success, else why not.
std::string EnterPrivateNetworkNamespace() {
  // To come back to if the new namespace's loopback cannot be brought up.
  const int original = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  // Before any thread starts: unshare applies to the calling thread only.
  if (unshare(CLONE_NEWNET) != 0) {
    if (original >= 0) close(original);
    return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  std::string why;
  if (fd < 0) {
    why = std::string("socket: ") + std::strerror(errno);
  } else if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    why = std::string("SIOCGIFFLAGS lo: ") + std::strerror(errno);
  } else {
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) why = std::string("SIOCSIFFLAGS lo up: ") + std::strerror(errno);
  }
  if (fd >= 0) close(fd);
  if (!why.empty() && (original < 0 || setns(original, CLONE_NEWNET) != 0)) {
    std::fprintf(stderr, "netns_test_main: %s, and cannot return to the machine's network\n", why.c_str());
    std::exit(1);
  }
  if (original >= 0) close(original);
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
