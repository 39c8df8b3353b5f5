#include "lightning/cluster/environment.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardlight::lightning::cluster {
namespace {

using ::testing::HasSubstr;

// Recorded from `torchrun --standalone --nproc_per_node=4 --no_python env`
// (Debian's python3-torch 1.13), worker 2.
EnvMap TorchrunStandalone() {
  return {{"RANK", "2"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", "2"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"GROUP_RANK", "0"},
          {"GROUP_WORLD_SIZE", "1"},
          {"ROLE_RANK", "2"},
          {"MASTER_ADDR", "localhost"},
          {"MASTER_PORT", "41917"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_RUN_ID", "2b1e0c4e-7d21-4d38-9b33-4fd8b3c6b0a1"},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
          {"OMP_NUM_THREADS", "1"}};
}

// Recorded from an `srun -N2 --ntasks-per-node=2` step, task 3.
EnvMap SlurmTask3() {
  return {{"SLURM_PROCID", "3"},        {"SLURM_NTASKS", "4"},        {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},        {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_JOB_ID", "4711234"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_NAME", "train"}};
}

// Recorded from `mpirun -np 2 env` (Open MPI 4.1.4), rank 1.
EnvMap MpiRank1() {
  return {{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_MCA_ess_base_jobid", "2003566593"},
          {"PMIX_RANK", "1"}};
}

TEST(Environment, Torchrun) {
  auto p = DetectEnvironment(TorchrunStandalone());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->launcher, "torchrun");
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->local_rank, 2);
  EXPECT_EQ(p->local_world_size, 4);
  EXPECT_EQ(p->node_rank, 0);
  EXPECT_EQ(p->master_addr, "localhost");
  EXPECT_EQ(p->master_port, 41917);
  EXPECT_EQ(p->store_mode, StoreMode::kRankZeroHosts);
  EXPECT_EQ(p->run_id, "2b1e0c4e-7d21-4d38-9b33-4fd8b3c6b0a1");
}

TEST(Environment, TorchrunStaticRendezvousUsesTheAgentStore) {
  EnvMap env = TorchrunStandalone();
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RESTART_COUNT"] = "3";
  auto p = DetectEnvironment(env);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->store_mode, StoreMode::kAgentHosts);
  EXPECT_EQ(p->store_prefix, "/worker/attempt_3");
  EXPECT_EQ(p->restart_count, 3);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "maybe";
  EXPECT_THAT(DetectEnvironment(env).status().message(), HasSubstr("TORCHELASTIC_USE_AGENT_STORE='maybe'"));
}

TEST(Environment, Slurm) {
  auto p = DetectEnvironment(SlurmTask3());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->launcher, "slurm");
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->local_world_size, 2);
  EXPECT_EQ(p->node_rank, 1);
  EXPECT_EQ(p->master_addr, "gpu07");
  EXPECT_EQ(p->master_port, 10000 + 1234);  // from SLURM_JOB_ID's last four digits
  EnvMap env = SlurmTask3();
  env["MASTER_PORT"] = "29555";
  env["MASTER_ADDR"] = "10.0.0.9";
  p = DetectEnvironment(env);
  EXPECT_EQ(p->master_port, 29555);
  EXPECT_EQ(p->master_addr, "10.0.0.9");
  env = SlurmTask3();
  env.erase("SLURM_JOB_NODELIST");
  env["SLURM_NODELIST"] = "cn-[3,5]";
  EXPECT_EQ(DetectEnvironment(env)->master_addr, "cn-3");
}

TEST(Environment, OpenMpi) {
  auto p = DetectEnvironment(MpiRank1());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->launcher, "mpi");
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->master_addr, "127.0.0.1");  // every rank on this node
  EXPECT_EQ(p->master_port, 10000 + 6593);
  EnvMap multi = MpiRank1();
  multi["OMPI_COMM_WORLD_SIZE"] = "4";
  EXPECT_THAT(DetectEnvironment(multi).status().message(), HasSubstr("MASTER_ADDR is not set"));
  multi["MASTER_ADDR"] = "host0";
  EXPECT_EQ(DetectEnvironment(multi)->master_addr, "host0");
}

TEST(Environment, SingleProcessByDefault) {
  auto p = DetectEnvironment({});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->launcher, "single");
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->world_size, 1);
}

TEST(Environment, DetectionOrderPrefersTheSpecificLauncher) {
  // torchrun inside a Slurm allocation: SLURM_* are left over.
  EnvMap env = TorchrunStandalone();
  for (const auto& [k, v] : SlurmTask3()) env[k] = v;
  EXPECT_EQ(DetectEnvironment(env)->launcher, "torchrun");
  // mpirun inside a Slurm allocation.
  env = MpiRank1();
  for (const auto& [k, v] : SlurmTask3()) env[k] = v;
  EXPECT_EQ(DetectEnvironment(env)->launcher, "mpi");
  EXPECT_EQ(DetectEnvironment(env)->rank, 1);
}

TEST(Environment, OverridesWin) {
  PlacementOverrides o;
  o.launcher = "single";
  o.rank = 1;
  o.world_size = 2;
  o.master_addr = "10.1.2.3";
  o.master_port = 1234;
  auto p = DetectEnvironment(TorchrunStandalone(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->launcher, "single");
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->master_addr, "10.1.2.3");
  EXPECT_EQ(p->master_port, 1234);
  o = {};
  o.launcher = "slurm";
  EXPECT_THAT(DetectEnvironment(TorchrunStandalone(), o).status().message(), HasSubstr("SLURM_NTASKS is not set"));
  o.launcher = "pbs";
  EXPECT_THAT(DetectEnvironment({}, o).status().message(), HasSubstr("unknown cluster environment 'pbs'"));
  o = {};
  o.rank = 7;
  EXPECT_THAT(DetectEnvironment(TorchrunStandalone(), o).status().message(), HasSubstr("rank 7 is outside [0, 3]"));
}

struct BadCase {
  EnvMap (*base)();
  const char* var;
  const char* value;  // nullptr: erase
  const char* expect;
};

TEST(Environment, BadVariablesAreNamedWithTheirValues) {
  const BadCase cases[] = {
      {TorchrunStandalone, "RANK", "4", "RANK=4 is not below WORLD_SIZE=4"},
      {TorchrunStandalone, "RANK", "two", "RANK='two' is not a non-negative integer"},
      {TorchrunStandalone, "RANK", "-1", "RANK='-1' is not a non-negative integer"},
      {TorchrunStandalone, "RANK", nullptr, "RANK is not set"},
      {TorchrunStandalone, "WORLD_SIZE", "0", "WORLD_SIZE='0' is outside [1, "},
      {TorchrunStandalone, "WORLD_SIZE", "99999999999999999999", "WORLD_SIZE='99999999999999999999' is not"},
      {TorchrunStandalone, "LOCAL_RANK", "4", "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"},
      {TorchrunStandalone, "LOCAL_WORLD_SIZE", "8", "LOCAL_WORLD_SIZE=8 exceeds WORLD_SIZE=4"},
      {TorchrunStandalone, "MASTER_PORT", "70000", "MASTER_PORT='70000' is outside [1, 65535]"},
      {TorchrunStandalone, "MASTER_PORT", "29500\n", "MASTER_PORT='29500\\x0a' is not"},
      {TorchrunStandalone, "MASTER_ADDR", nullptr, "MASTER_ADDR is not set"},
      {TorchrunStandalone, "MASTER_ADDR", "", "MASTER_ADDR='' is empty"},
      {SlurmTask3, "SLURM_PROCID", "4", "SLURM_PROCID=4 is not below SLURM_NTASKS=4"},
      {SlurmTask3, "SLURM_NTASKS", "x", "SLURM_NTASKS='x' is not"},
      {SlurmTask3, "SLURM_LOCALID", "2", "SLURM_LOCALID=2 is not below the tasks per node (2)"},
      {SlurmTask3, "SLURM_JOB_NODELIST", "gpu[07-", "SLURM_JOB_NODELIST: bad Slurm host list 'gpu[07-'"},
      {MpiRank1, "OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2"},
      {MpiRank1, "OMPI_COMM_WORLD_LOCAL_RANK", "5", "OMPI_COMM_WORLD_LOCAL_RANK=5 is not below"},
  };
  for (const BadCase& c : cases) {
    EnvMap env = c.base();
    if (c.value == nullptr) {
      env.erase(c.var);
    } else {
      env[c.var] = c.value;
    }
    auto p = DetectEnvironment(env);
    ASSERT_FALSE(p.ok()) << c.var << "=" << (c.value ? c.value : "(unset)");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr(c.expect)) << c.var;
  }
}

TEST(Environment, DescribeSaysWhereTheStoreIs) {
  EXPECT_THAT(Describe(*DetectEnvironment(TorchrunStandalone())),
              HasSubstr("torchrun rank 2/4 (local 2/4, node 0), store localhost:41917 (hosted by rank 0)"));
}

TEST(Environment, ShortKillGraceUnderMpirunIsNamed) {
  ProcessPlacement mpi;
  mpi.launcher = "mpi";
  const auto needed = std::chrono::milliseconds(7000);
  auto warning = ShortKillGraceWarning(mpi, {}, needed);  // Open MPI's default: 1 s
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning, HasSubstr("SIGKILL 1 s after"));
  EXPECT_THAT(*warning, HasSubstr("--mca odls_base_sigkill_timeout 7"));
  EXPECT_THAT(*ShortKillGraceWarning(mpi, {{"OMPI_MCA_odls_base_sigkill_timeout", "6"}}, needed),
              HasSubstr("SIGKILL 6 s after"));
  EXPECT_FALSE(ShortKillGraceWarning(mpi, {{"OMPI_MCA_odls_base_sigkill_timeout", "7"}}, needed).has_value());
  EXPECT_THAT(*ShortKillGraceWarning(mpi, {{"OMPI_MCA_odls_base_sigkill_timeout", "x"}}, needed),
              HasSubstr("OMPI_MCA_odls_base_sigkill_timeout=x is not a number"));
  ProcessPlacement torchrun;
  torchrun.launcher = "torchrun";
  EXPECT_FALSE(ShortKillGraceWarning(torchrun, {}, needed).has_value());
}

}  // namespace
}  // namespace shardlight::lightning::cluster
