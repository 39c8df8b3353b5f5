#include "lightning/gate/build_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardlight::lightning {
namespace {

using ::testing::HasSubstr;

// Shaped like a CUDA wheel's at::show_config(): the NVCC line has commas and
// '=' too, but only the Build settings line is parsed.
constexpr char kCudaConfig[] =
    "PyTorch built with:\n"
    "  - GCC 9.3\n"
    "  - NVCC architecture flags: -gencode;arch=compute_50,code=sm_50;-gencode;arch=compute_80,code=sm_80\n"
    "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=12.1, "
    "CXX_FLAGS= -D_GLIBCXX_USE_CXX11_ABI=0 -Wl,--as-needed, -Werror=return-type, tuned for sm_80, "
    "TORCH_CUDA_ARCH_LIST=5.0;8.0, TORCH_VERSION=2.1.0, USE_CUDA=ON, USE_EXCEPTION_PTR=1, USE_MPI=OFF, "
    "USE_NCCL=1, USE_ROCM=OFF, \n";

TEST(BuildSettingsTest, ParsesEveryEntryOfACudaWheelConfig) {
  absl::StatusOr<BuildSettings> s = ParseBuildSettings(kCudaConfig);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->torch_version.ToString(), "2.1.0");
  // ", -Werror" and ", tuned" do not start KEY=, so they stay inside CXX_FLAGS.
  EXPECT_EQ(s->Entry("CXX_FLAGS"), "-D_GLIBCXX_USE_CXX11_ABI=0 -Wl,--as-needed, -Werror=return-type, tuned for sm_80");
  EXPECT_EQ(s->Entry("TORCH_CUDA_ARCH_LIST"), "5.0;8.0");
  EXPECT_EQ(s->Entry("USE_ROCM"), "OFF");
  EXPECT_EQ(s->entries.size(), 11u);
  EXPECT_EQ(s->use_flags.size(), 5u);
  EXPECT_EQ(s->Flag("USE_CUDA"), true);
  EXPECT_EQ(s->Flag("USE_NCCL"), true);  // "1" as well as "ON"
  EXPECT_EQ(s->Flag("USE_EXCEPTION_PTR"), true);
  EXPECT_EQ(s->Flag("USE_MPI"), false);
  EXPECT_EQ(s->Flag("USE_DISTRIBUTED"), std::nullopt);  // never listed by the library
  EXPECT_EQ(s->Entry("NVCC"), std::nullopt);
}

TEST(BuildSettingsTest, MalformedTextIsAClearError) {
  struct Case {
    std::string text;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"", "no \"Build settings:\" line"},
           {"PyTorch built with:\n  - GCC 12.2\n", "no \"Build settings:\" line"},
           {"  - Build settings: \n", "line is empty"},
           {"  - Build settings: , \n", "line is empty"},
           {"  - Build settings: , , \n", "entry \", \" is not KEY=VALUE"},
           {"  - Build settings: garbage\n", "entry \"garbage\" is not KEY=VALUE"},
           {"  - Build settings: =1.13.0, USE_CUDA=OFF\n", "entry \"=1.13.0\" is not KEY=VALUE"},
           {"  - Build settings: USE_CUDA=OFF\n", "no TORCH_VERSION= entry"},
           {"  - Build settings: TORCH_VERSION=1.x, USE_CUDA=OFF\n", "TORCH_VERSION: invalid torch version \"1.x\""},
           {"  - Build settings: TORCH_VERSION=, USE_CUDA=OFF\n", "TORCH_VERSION: invalid torch version"},
           {"  - Build settings: TORCH_VERSION=1.13.0, USE_CUDA=maybe\n", "USE_CUDA=maybe is not ON/OFF/1/0"},
           {"  - Build settings: TORCH_VERSION=1.13.0, USE_CUDA=ON, USE_CUDA=OFF\n", "key USE_CUDA appears twice"},
           {std::string("  - Build settings: TORCH_VERSION=1.13.0") + '\0' + ", USE_CUDA=ON",
            "TORCH_VERSION: invalid torch version \"1.13.0\\x00\""},
       }) {
    absl::StatusOr<BuildSettings> s = ParseBuildSettings(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("malformed at::show_config() build settings")) << c.text;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.why)) << c.text;
  }
}

}  // namespace
}  // namespace shardlight::lightning
