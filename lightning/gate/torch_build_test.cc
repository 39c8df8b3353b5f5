#include "lightning/gate/torch_build.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardlight::lightning {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string Config(const std::string& torch_version, const std::string& extra = "") {
  return absl::StrCat("PyTorch built with:\n  - Build settings: BUILD_TYPE=Release, CXX_FLAGS=-O2 -fPIC, ", extra,
                      "TORCH_VERSION=", torch_version, ", USE_CUDA=OFF, USE_MPI=OFF, USE_NCCL=OFF, \n");
}

TorchBuild Build(TorchBuildParts parts) {
  absl::StatusOr<TorchBuild> build = TorchBuild::FromParts(std::move(parts));
  EXPECT_TRUE(build.ok()) << build.status();
  return *std::move(build);
}

BackendBuild Gloo() { return {C10dBackend::kGloo, true, RequiredCollectives()}; }

// Both real builds CI meets (Debian's 1.13 CPU, the torch 2.x CUDA wheel):
// the expected version and CUDA come from the LibTorch's files
// (SHARDLIGHT_EXPECT_*, lightning/gate/BUILD.bazel), the gate reads them from
// the loaded library.
TEST(TorchBuildTest, CurrentDescribesThisMachinesLibTorch) {
  absl::StatusOr<TorchBuild> build = TorchBuild::Current();
  ASSERT_TRUE(build.ok()) << build.status();
  EXPECT_EQ(build->library_version().Major(), SHARDLIGHT_EXPECT_TORCH_MAJOR);
  EXPECT_EQ(build->library_version().Minor(), SHARDLIGHT_EXPECT_TORCH_MINOR);
  EXPECT_EQ(build->headers().major, SHARDLIGHT_EXPECT_TORCH_MAJOR);
  EXPECT_EQ(build->headers().minor, SHARDLIGHT_EXPECT_TORCH_MINOR);
  EXPECT_TRUE(build->HeadersMatchLibrary());
  ASSERT_TRUE(build->version().ok()) << build->version().status();
  EXPECT_EQ(build->version()->Major(), SHARDLIGHT_EXPECT_TORCH_MAJOR);
  EXPECT_EQ(build->version()->Minor(), SHARDLIGHT_EXPECT_TORCH_MINOR);
  EXPECT_THAT(build->parts().show_config, HasSubstr("Build settings:"));
  EXPECT_TRUE(build->settings().Flag("USE_MPI").has_value());

  const BackendBuild* gloo = build->Backend(C10dBackend::kGloo);
  ASSERT_NE(gloo, nullptr) << "USE_C10D_GLOO is defined by @libtorch";
  EXPECT_TRUE(gloo->library_has_class);
  EXPECT_EQ(gloo->collectives, RequiredCollectives());
  EXPECT_EQ(build->UsableBackend(C10dBackend::kGloo), gloo);
#if SHARDLIGHT_EXPECT_CUDA
  // A CUDA build: NCCL compiled in (USE_C10D_NCCL), the library's NCCL class
  // and every collective present, its build description says CUDA.
  const BackendBuild* nccl = build->Backend(C10dBackend::kNccl);
  ASSERT_NE(nccl, nullptr) << "USE_C10D_NCCL is defined by @libtorch for a CUDA LibTorch";
  EXPECT_TRUE(nccl->library_has_class);
  EXPECT_EQ(nccl->collectives, RequiredCollectives());
  EXPECT_EQ(build->settings().Flag("USE_CUDA"), true);
  EXPECT_EQ(build->settings().Flag("USE_NCCL"), true);
#else
  EXPECT_EQ(build->Backend(C10dBackend::kNccl), nullptr);
  EXPECT_EQ(build->settings().Flag("USE_CUDA"), false);
#endif
  for (const std::string& w : build->Warnings()) {
    EXPECT_THAT(w, Not(HasSubstr("compiled against one LibTorch"))) << w;
  }
}

// The mangled names CurrentParts() uses for NCCL/MPI, checked on the backend
// this machine has: if the table went stale, Gloo would miss a collective.
TEST(TorchBuildTest, LibrarySymbolTableMatchesThisLibrary) {
  EXPECT_TRUE(LibraryExportsBackendClass(C10dBackend::kGloo));
  for (const std::string& c : RequiredCollectives()) {
    EXPECT_TRUE(LibraryExportsCollective(C10dBackend::kGloo, c)) << c;
  }
  EXPECT_FALSE(LibraryExportsCollective(C10dBackend::kGloo, "allreduce_everything"));
#if SHARDLIGHT_EXPECT_CUDA
  EXPECT_TRUE(LibraryExportsBackendClass(C10dBackend::kNccl));
  EXPECT_TRUE(LibraryExportsCollective(C10dBackend::kNccl, "allgather"));
#else
  EXPECT_FALSE(LibraryExportsBackendClass(C10dBackend::kNccl));
  EXPECT_FALSE(LibraryExportsCollective(C10dBackend::kNccl, "allgather"));
#endif
}

TEST(TorchBuildTest, MalformedShowConfigIsAnErrorNotACrash) {
  for (const std::string text : {"", "PyTorch built with:\n  - GCC 12.2\n", "  - Build settings: TORCH_VERSION=1.x, "}) {
    absl::StatusOr<TorchBuild> build = TorchBuild::FromParts({"1.13.0", {1, 13, 0}, text, {Gloo()}});
    ASSERT_FALSE(build.ok()) << text;
    EXPECT_EQ(build.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(build.status().message()), HasSubstr("malformed at::show_config()"));
  }
}

TEST(TorchBuildTest, MalformedVersionStringIsKeptAndWarnedAbout) {
  TorchBuild build = Build({"1.13.x-internal", {1, 13, 0}, Config("1.13.0"), {Gloo()}});
  ASSERT_FALSE(build.version().ok());
  EXPECT_THAT(build.Warnings(), ElementsAre(HasSubstr("version string is not PEP 440: invalid torch version "
                                                      "\"1.13.x-internal\"")));
}

TEST(TorchBuildTest, ConsistentBuildHasNoWarnings) {
  TorchBuild build = Build({"1.13.0", {1, 13, 0}, Config("1.13.0"), {Gloo()}});
  EXPECT_THAT(build.Warnings(), IsEmpty());
  EXPECT_EQ(build.SourceTreeVersion(), "");
}

TEST(TorchBuildTest, HeaderLibraryMajorMinorMismatchIsWarned) {
  TorchBuild build = Build({"2.1.0", {1, 13, 0}, Config("2.1.0"), {Gloo()}});
  EXPECT_FALSE(build.HeadersMatchLibrary());
  EXPECT_THAT(build.Warnings(), ElementsAre("headers are LibTorch 1.13 but the loaded library reports "
                                            "TORCH_VERSION=2.1.0: compiled against one LibTorch, running with "
                                            "another"));
  TorchBuild minor = Build({"1.12.1", {1, 13, 0}, Config("1.12.1"), {Gloo()}});
  EXPECT_FALSE(minor.HeadersMatchLibrary());
  EXPECT_THAT(minor.Warnings(), ElementsAre(HasSubstr("headers are LibTorch 1.13 but the loaded library reports "
                                                      "TORCH_VERSION=1.12.1")));
}

TEST(TorchBuildTest, PatchMismatchIsWarnedButMatchesAbi) {
  TorchBuild build = Build({"1.13.1", {1, 13, 0}, Config("1.13.1"), {Gloo()}});
  EXPECT_TRUE(build.HeadersMatchLibrary());
  EXPECT_THAT(build.Warnings(), ElementsAre("headers say 1.13.0 but the loaded library reports TORCH_VERSION=1.13.1 "
                                            "(patch releases differ)"));
}

// Debian's libtorch 1.13.1 reports TORCH_VERSION=1.13.0; its CXX_FLAGS name
// the source tree it was built from.
TEST(TorchBuildTest, SourceTreeNewerThanReportedVersionIsWarned) {
  TorchBuild build = Build({"1.13.0",
                 {1, 13, 0},
                 "  - Build settings: CXX_FLAGS=-g -ffile-prefix-map=/build/pytorch-BBcGlf/pytorch-1.13.1+dfsg=. "
                 "-O2, TORCH_VERSION=1.13.0, USE_CUDA=OFF, \n",
                 {Gloo()}});
  EXPECT_EQ(build.SourceTreeVersion(), "1.13.1+dfsg");
  EXPECT_THAT(build.Warnings(), ElementsAre("the library was built from pytorch-1.13.1+dfsg sources but reports "
                                            "TORCH_VERSION=1.13.0: its version file lags the release it packages"));
}

TEST(TorchBuildTest, VersionStringNamingAnotherReleaseIsWarned) {
  TorchBuild build = Build({"1.13.1", {1, 13, 1}, Config("1.13.0"), {Gloo()}});
  EXPECT_THAT(build.Warnings(),
              Contains("version string 1.13.1 names release 1.13.1 but the loaded library reports TORCH_VERSION=1.13.0"));
  // A pre-release's base version is what is compared: no warning for NGC's.
  TorchBuild ngc = Build({"1.10.0a0+ecc3718", {1, 10, 0}, Config("1.10.0"), {Gloo()}});
  EXPECT_THAT(ngc.Warnings(), IsEmpty());
}

TEST(TorchBuildTest, BackendsTheLibraryDoesNotHaveAreWarnedAndUnusable) {
  BackendBuild nccl{C10dBackend::kNccl, /*library_has_class=*/false, {}};
  BackendBuild mpi{C10dBackend::kMpi, /*library_has_class=*/true, RequiredCollectives()};
  TorchBuild build = Build({"1.13.0", {1, 13, 0}, Config("1.13.0"), {Gloo(), nccl, mpi}});
  EXPECT_THAT(build.Warnings(),
              ElementsAre("USE_C10D_NCCL is defined at compile time but the loaded library has no c10d::ProcessGroupNCCL",
                          "USE_C10D_NCCL is defined at compile time but the library says USE_NCCL=OFF",
                          "USE_C10D_MPI is defined at compile time but the library says USE_MPI=OFF"));
  EXPECT_EQ(build.UsableBackend(C10dBackend::kNccl), nullptr);
  EXPECT_EQ(build.UsableBackend(C10dBackend::kMpi), nullptr);
  EXPECT_NE(build.UsableBackend(C10dBackend::kGloo), nullptr);
  EXPECT_NE(build.Backend(C10dBackend::kMpi), nullptr);
}

}  // namespace
}  // namespace shardlight::lightning
