#include "lightning/gate/simulated_builds.h"

#include <utility>

#include "absl/strings/substitute.h"

namespace shardlight::lightning {
namespace {

// Debian 12's libtorch 1.13.1 as it describes itself (this machine's output).
constexpr char kDebianConfig[] =
    "PyTorch built with:\n"
    "  - GCC 12.2\n"
    "  - C++ Version: 201402\n"
    "  - Intel(R) MKL-DNN v2.6.3 (Git Hash N/A)\n"
    "  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n"
    "  - LAPACK is enabled (usually provided by MKL)\n"
    "  - CPU capability usage: AVX2\n"
    "  - Build settings: BLAS_INFO=generic, BUILD_TYPE=RelWithDebInfo, CXX_COMPILER=/usr/bin/c++, "
    "CXX_FLAGS=-Wdate-time -D_FORTIFY_SOURCE=2 -g -O2 "
    "-ffile-prefix-map=/build/pytorch-BBcGlf/pytorch-1.13.1+dfsg=. -fstack-protector-strong -Wformat "
    "-Werror=format-security -gsplit-dwarf -fvisibility-inlines-hidden -DUSE_PTHREADPOOL -fopenmp -O2 -fPIC "
    "-Wall -Wextra -Werror=return-type, LAPACK_INFO=generic, PERF_WITH_AVX=1, PERF_WITH_AVX2=1, "
    "PERF_WITH_AVX512=1, TORCH_VERSION=1.13.0, USE_CUDA=OFF, USE_CUDNN=OFF, USE_EXCEPTION_PTR=1, "
    "USE_GFLAGS=ON, USE_GLOG=ON, USE_MKLDNN=ON, USE_MPI=OFF, USE_NCCL=OFF, USE_NNPACK=OFF, USE_OPENMP=ON, "
    "USE_ROCM=OFF, \n";

// The shape of an official wheel's (CUDA) or CPU build's description.
std::string Config(absl::string_view torch_version, bool cuda, absl::string_view use_nccl = "OFF",
                   absl::string_view use_mpi = "OFF") {
  return absl::Substitute(
      "PyTorch built with:\n"
      "  - GCC 9.3\n"
      "  - C++ Version: 201703\n"
      "  - Intel(R) oneAPI Math Kernel Library Version 2022.2-Product Build 20220804\n"
      "  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n"
      "$0"
      "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, $1CXX_COMPILER=/opt/rh/devtoolset-9/root/usr/bin/c++, "
      "CXX_FLAGS= -D_GLIBCXX_USE_CXX11_ABI=1 -fvisibility-inlines-hidden -DUSE_PTHREADPOOL -DNDEBUG "
      "-DUSE_KINETO -O2 -fPIC -Wall -Wextra -Werror=return-type, LAPACK_INFO=mkl, PERF_WITH_AVX=1, "
      "PERF_WITH_AVX2=1, PERF_WITH_AVX512=1, TORCH_VERSION=$2, USE_CUDA=$3, USE_CUDNN=$3, "
      "USE_EXCEPTION_PTR=1, USE_GFLAGS=OFF, USE_GLOG=OFF, USE_MKL=ON, USE_MKLDNN=ON, USE_MPI=$4, "
      "USE_NCCL=$5, USE_NNPACK=ON, USE_OPENMP=ON, USE_ROCM=OFF, \n",
      cuda ? "  - CUDA Runtime 12.1\n  - NVCC architecture flags: -gencode;arch=compute_80,code=sm_80\n" : "",
      cuda ? "CUDA_VERSION=12.1, CUDNN_VERSION=8.9.2, " : "", torch_version, cuda ? "ON" : "OFF", use_mpi,
      use_nccl);
}

BackendBuild Backend(C10dBackend backend, std::vector<std::string> collectives = RequiredCollectives(),
                     bool library_has_class = true) {
  return BackendBuild{backend, library_has_class, std::move(collectives)};
}

SimulatedBuild Make(std::string name, std::string description, TorchBuildParts parts, ExpectedDecision expected,
                    GateEnvironment env = {}) {
  return SimulatedBuild{std::move(name), std::move(description), TorchBuild::FromParts(std::move(parts)),
                        std::move(env), std::move(expected)};
}

TorchBuildParts DebianParts() {
  return {"1.13.0", {1, 13, 0}, kDebianConfig, {Backend(C10dBackend::kGloo)}};
}

}  // namespace

FeatureDecision Decide(const SimulatedBuild& simulated) {
  return DecideShardedSupportFor(simulated.build, simulated.environment);
}

std::vector<SimulatedBuild> SimulatedBuilds() {
  const std::string kAll = "implements allgather, alltoall_base, broadcast, gather, scatter, barrier";
  std::vector<SimulatedBuild> out;
  out.push_back(Make("debian-1.13-cpu", "Debian 12 libtorch 1.13.1 (reports 1.13.0), CPU, Gloo", DebianParts(),
                     {true, {}, {"the gloo backend " + kAll}, {"1.13.0 is release 1.13.0", "and agree"}}));
  out.push_back(Make(
      "ngc-21.07", "NGC 21.07 container: 1.10.0a0+ecc3718 snapshot, CUDA, NCCL without gather/scatter",
      {"1.10.0a0+ecc3718",
       {1, 10, 0},
       Config("1.10.0", true, "ON"),
       {Backend(C10dBackend::kGloo),
        Backend(C10dBackend::kNccl, {"allgather", "alltoall_base", "broadcast", "barrier"})}},
      {false,
       {"gather", "scatter"},
       {"the nccl backend lacks gather, scatter"},
       {"pre-release (alpha 0) of 1.10.0, local label 'ecc3718' (NGC-style source build)",
        "a naive major.minor >= 1.10 check passes, a PEP 440 >= 1.10.0 check fails",
        "a version check would have passed, but gather, scatter are missing"}}));
  out.push_back(Make("pip-2.1.0-cu121", "official CUDA 12.1 wheel's LibTorch 2.1.0, Gloo + NCCL",
                     {"2.1.0+cu121",
                      {2, 1, 0},
                      Config("2.1.0", true, "1"),
                      {Backend(C10dBackend::kGloo), Backend(C10dBackend::kNccl)}},
                     {true, {}, {"the nccl backend " + kAll}, {"release 2.1.0, local label 'cu121'"}}));
  out.push_back(Make("cpu-no-distributed", "LibTorch 1.13.0 built with USE_DISTRIBUTED=0: no c10d backend",
                     {"1.13.0", {1, 13, 0}, Config("1.13.0", false), {}},
                     {false, {"c10d_backend"}, {"no usable c10d backend", "compiled in: none"},
                      {"a version check would have passed, but c10d_backend is missing"}}));
  out.push_back(Make("mpi-only", "LibTorch 1.13.0 with MPI as its only c10d backend",
                     {"1.13.0", {1, 13, 0}, Config("1.13.0", false, "OFF", "ON"), {Backend(C10dBackend::kMpi)}},
                     {false, {"c10d_backend"}, {"no usable c10d backend", "compiled in: mpi"}, {}}));
  out.push_back(Make("nightly-1.10.0.dev", "nightly 1.10.0.dev20210809, CPU, Gloo",
                     {"1.10.0.dev20210809", {1, 10, 0}, Config("1.10.0", false), {Backend(C10dBackend::kGloo)}},
                     {true, {}, {"the gloo backend " + kAll},
                      {"a dev (nightly) build of 1.10.0", "a PEP 440 >= 1.10.0 check fails"}}));
  out.push_back(Make("rc-2.0.0rc1", "release candidate 2.0.0rc1, CUDA, Gloo + NCCL",
                     {"2.0.0rc1",
                      {2, 0, 0},
                      Config("2.0.0", true, "ON"),
                      {Backend(C10dBackend::kGloo), Backend(C10dBackend::kNccl)}},
                     {true, {}, {"the nccl backend " + kAll}, {"a pre-release (release candidate 1) of 2.0.0"}}));
  out.push_back(Make("malformed-version", "an in-house build labelled \"1.13.x-internal\", CPU, Gloo",
                     {"1.13.x-internal", {1, 13, 0}, Config("1.13.0", false), {Backend(C10dBackend::kGloo)}},
                     {true, {}, {"the gloo backend " + kAll}, {"is not PEP 440", "capabilities decided"}}));
  out.push_back(Make("header-library-mismatch", "compiled against 1.13 headers, running on a 2.1.0 library",
                     {"2.1.0", {1, 13, 0}, Config("2.1.0", false), {Backend(C10dBackend::kGloo)}},
                     {false, {"headers_match_library"}, {"headers are 1.13 but the library is 2.1.0"}, {}}));
  out.push_back(Make("gloo-without-alltoall", "a trimmed 1.13.0 build whose Gloo lacks alltoall_base",
                     {"1.13.0",
                      {1, 13, 0},
                      Config("1.13.0", false),
                      {Backend(C10dBackend::kGloo, {"allgather", "broadcast", "gather", "scatter", "barrier"})}},
                     {false, {"alltoall_base"}, {"the gloo backend lacks alltoall_base"}, {}}));
  out.push_back(Make("nccl-headers-cpu-library",
                     "compiled with USE_C10D_NCCL against a CPU-only library: NCCL absent, Gloo used",
                     {"1.13.0",
                      {1, 13, 0},
                      Config("1.13.0", false),
                      {Backend(C10dBackend::kGloo), Backend(C10dBackend::kNccl, {}, /*library_has_class=*/false)}},
                     {true, {}, {"the gloo backend " + kAll}, {}}));
  out.push_back(Make("undescribable", "a library whose at::show_config() has no Build settings line",
                     {"1.13.0", {1, 13, 0}, "PyTorch built with:\n  - GCC 12.2\n", {Backend(C10dBackend::kGloo)}},
                     {false, {"build_description"}, {"cannot be described", "no \"Build settings:\" line"}, {}}));
  out.push_back(Make("env-disabled", "Debian's build with SHARDLIGHT_DISABLE_SHARDED=1", DebianParts(),
                     {false, {}, {"SHARDLIGHT_DISABLE_SHARDED=1 is set"}, {"the environment decided"}},
                     GateEnvironment{"1"}));
  return out;
}

}  // namespace shardlight::lightning
