// Catches build-system mistakes: the wrong LibTorch on the include path, a
// missing USE_C10D_GLOO define, or a link against a different major.minor
// than the headers describe.
#include <ATen/ATen.h>
#include <ATen/Version.h>
#include <gtest/gtest.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <regex>
#include <string>

namespace {

#ifndef USE_C10D_GLOO
#error "USE_C10D_GLOO must be defined by @libtorch: ProcessGroupGloo is only declared with it"
#endif

TEST(BuildSanityTest, GlooProcessGroupIsDeclaredAndLinked) {
  // Taking the address forces the symbol to resolve at link time.
  auto* create = &c10d::ProcessGroupGloo::createDeviceForHostname;
  EXPECT_NE(create, nullptr);
  auto device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  EXPECT_NE(device, nullptr);
}

TEST(BuildSanityTest, LinkedLibraryVersionMatchesHeadersMajorMinor) {
  const std::string config = at::show_config();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(config, m, std::regex(R"(TORCH_VERSION=(\d+)\.(\d+)\.(\d+))")))
      << "the linked libtorch does not report TORCH_VERSION in at::show_config():\n"
      << config;
  EXPECT_EQ(std::stoi(m[1]), TORCH_VERSION_MAJOR) << config;
  EXPECT_EQ(std::stoi(m[2]), TORCH_VERSION_MINOR) << config;
}

TEST(BuildSanityTest, TensorMathRunsOnTheLinkedLibrary) {
  at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  EXPECT_EQ(a.sum().item<float>(), 15.0f);
  EXPECT_EQ(at::matmul(a, a.t())[1][1].item<float>(), 9.0f + 16.0f + 25.0f);
}

}  // namespace
