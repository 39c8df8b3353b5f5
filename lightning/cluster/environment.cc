#include "lightning/cluster/environment.h"

#include <cstdint>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lightning/cluster/slurm_hostlist.h"
#include "sharded/status_macros.h"

extern char** environ;

namespace shardlight::lightning::cluster {
namespace {

bool Has(const EnvMap& env, const std::string& name) { return env.count(name) > 0; }

// Printable form of a variable's value for error messages.
std::string Quoted(const std::string& value) {
  std::string out = "'";
  for (unsigned char c : value.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  if (value.size() > 64) out += "...";
  return out + "'";
}

absl::Status BadVar(const std::string& name, const std::string& value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(name, "=", Quoted(value), " ", why));
}

// A decimal integer in [lo, hi]; `fallback` when absent (nullopt: required).
absl::StatusOr<int> IntVar(const EnvMap& env, const std::string& name, int lo, int hi,
                           std::optional<int> fallback = std::nullopt) {
  auto it = env.find(name);
  if (it == env.end()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  const std::string& value = it->second;
  int64_t parsed = 0;
  bool digits = !value.empty() && value.size() <= 18;
  for (char c : value) digits = digits && c >= '0' && c <= '9';
  if (!digits || !absl::SimpleAtoi(value, &parsed)) return BadVar(name, it->second, "is not a non-negative integer");
  if (parsed < lo || parsed > hi) {
    return BadVar(name, it->second, absl::StrCat("is outside [", lo, ", ", hi, "]"));
  }
  return static_cast<int>(parsed);
}

absl::Status RankBelow(const std::string& rank_name, int rank, const std::string& size_name, int size) {
  if (rank < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(rank_name, "=", rank, " is not below ", size_name, "=", size,
                                                 " (ranks are 0..", size - 1, ")"));
}

// A port derived from a job id: 10000 + the id's last four digits.
int PortFromJobId(const std::string& id) {
  uint64_t tail = 0;
  for (char c : id) {
    if (c >= '0' && c <= '9') tail = (tail * 10 + static_cast<uint64_t>(c - '0')) % 10000;
  }
  return 10000 + static_cast<int>(tail);
}

constexpr int kMaxRanks = 1 << 20;

absl::Status ReadMaster(const EnvMap& env, ProcessPlacement& p) {
  if (Has(env, "MASTER_ADDR")) {
    p.master_addr = env.at("MASTER_ADDR");
    if (p.master_addr.empty()) return BadVar("MASTER_ADDR", "", "is empty");
  }
  SL_ASSIGN_OR_RETURN(p.master_port, IntVar(env, "MASTER_PORT", 1, 65535, p.master_port));
  return absl::OkStatus();
}

class TorchrunEnvironment : public ClusterEnvironment {
 public:
  std::string name() const override { return "torchrun"; }
  bool Detected(const EnvMap& env) const override {
    return Has(env, "TORCHELASTIC_RUN_ID") || (Has(env, "GROUP_RANK") && Has(env, "LOCAL_WORLD_SIZE"));
  }
  absl::StatusOr<ProcessPlacement> Read(const EnvMap& env) const override {
    ProcessPlacement p;
    p.launcher = name();
    SL_ASSIGN_OR_RETURN(p.world_size, IntVar(env, "WORLD_SIZE", 1, kMaxRanks));
    SL_ASSIGN_OR_RETURN(p.rank, IntVar(env, "RANK", 0, kMaxRanks));
    SL_RETURN_IF_ERROR(RankBelow("RANK", p.rank, "WORLD_SIZE", p.world_size));
    SL_ASSIGN_OR_RETURN(p.local_world_size, IntVar(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks, 1));
    SL_ASSIGN_OR_RETURN(p.local_rank, IntVar(env, "LOCAL_RANK", 0, kMaxRanks, 0));
    SL_RETURN_IF_ERROR(RankBelow("LOCAL_RANK", p.local_rank, "LOCAL_WORLD_SIZE", p.local_world_size));
    if (p.local_world_size > p.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("LOCAL_WORLD_SIZE=", p.local_world_size,
                                                     " exceeds WORLD_SIZE=", p.world_size));
    }
    SL_ASSIGN_OR_RETURN(p.node_rank, IntVar(env, "GROUP_RANK", 0, kMaxRanks, 0));
    SL_ASSIGN_OR_RETURN(p.restart_count, IntVar(env, "TORCHELASTIC_RESTART_COUNT", 0, kMaxRanks, 0));
    if (Has(env, "TORCHELASTIC_RUN_ID")) p.run_id = env.at("TORCHELASTIC_RUN_ID");
    if (!Has(env, "MASTER_ADDR") || !Has(env, "MASTER_PORT")) {
      return absl::InvalidArgumentError(
          absl::StrCat(Has(env, "MASTER_ADDR") ? "MASTER_PORT" : "MASTER_ADDR", " is not set (torchrun sets it)"));
    }
    SL_RETURN_IF_ERROR(ReadMaster(env, p));
    // Static rendezvous: the agent hosts the store and workers are its
    // clients under the attempt's prefix, as PyTorch's env:// init does.
    auto agent = env.find("TORCHELASTIC_USE_AGENT_STORE");
    if (agent != env.end()) {
      const std::string v = absl::AsciiStrToLower(agent->second);
      if (v == "true" || v == "1") {
        p.store_mode = StoreMode::kAgentHosts;
        p.store_prefix = absl::StrCat("/worker/attempt_", p.restart_count);
      } else if (v != "false" && v != "0") {
        return BadVar("TORCHELASTIC_USE_AGENT_STORE", agent->second, "is not True or False");
      }
    }
    return p;
  }
};

class MpiEnvironment : public ClusterEnvironment {
 public:
  std::string name() const override { return "mpi"; }
  bool Detected(const EnvMap& env) const override { return Has(env, "OMPI_COMM_WORLD_RANK"); }
  absl::StatusOr<ProcessPlacement> Read(const EnvMap& env) const override {
    ProcessPlacement p;
    p.launcher = name();
    SL_ASSIGN_OR_RETURN(p.world_size, IntVar(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks));
    SL_ASSIGN_OR_RETURN(p.rank, IntVar(env, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks));
    SL_RETURN_IF_ERROR(RankBelow("OMPI_COMM_WORLD_RANK", p.rank, "OMPI_COMM_WORLD_SIZE", p.world_size));
    SL_ASSIGN_OR_RETURN(p.local_world_size, IntVar(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks, 1));
    SL_ASSIGN_OR_RETURN(p.local_rank, IntVar(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks, 0));
    SL_RETURN_IF_ERROR(RankBelow("OMPI_COMM_WORLD_LOCAL_RANK", p.local_rank, "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 p.local_world_size));
    // Open MPI does not name a node index; with the same number of ranks on
    // every node (mpirun's default mapping) it is rank / ranks-per-node.
    p.node_rank = p.rank / p.local_world_size;
    if (Has(env, "OMPI_MCA_ess_base_jobid")) p.run_id = env.at("OMPI_MCA_ess_base_jobid");
    if (!Has(env, "MASTER_ADDR") && p.local_world_size < p.world_size) {
      return absl::InvalidArgumentError(
          "MASTER_ADDR is not set and the job spans several nodes: pass -x MASTER_ADDR=<rank 0's host> to mpirun");
    }
    if (!p.run_id.empty()) p.master_port = PortFromJobId(p.run_id);
    SL_RETURN_IF_ERROR(ReadMaster(env, p));
    return p;
  }
};

class SlurmEnvironment : public ClusterEnvironment {
 public:
  std::string name() const override { return "slurm"; }
  bool Detected(const EnvMap& env) const override { return Has(env, "SLURM_PROCID") && Has(env, "SLURM_NTASKS"); }
  absl::StatusOr<ProcessPlacement> Read(const EnvMap& env) const override {
    ProcessPlacement p;
    p.launcher = name();
    SL_ASSIGN_OR_RETURN(p.world_size, IntVar(env, "SLURM_NTASKS", 1, kMaxRanks));
    SL_ASSIGN_OR_RETURN(p.rank, IntVar(env, "SLURM_PROCID", 0, kMaxRanks));
    SL_RETURN_IF_ERROR(RankBelow("SLURM_PROCID", p.rank, "SLURM_NTASKS", p.world_size));
    SL_ASSIGN_OR_RETURN(p.local_rank, IntVar(env, "SLURM_LOCALID", 0, kMaxRanks, 0));
    SL_ASSIGN_OR_RETURN(p.node_rank, IntVar(env, "SLURM_NODEID", 0, kMaxRanks, 0));
    // SLURM_NTASKS_PER_NODE may be compressed ("2(x3),1"): the local size
    // is only a hint, so it is read when it is a plain number.
    p.local_world_size = p.world_size;
    if (auto it = env.find("SLURM_NTASKS_PER_NODE"); it != env.end()) {
      int n = 0;
      if (absl::SimpleAtoi(it->second, &n) && n >= 1) p.local_world_size = n;
    }
    if (p.local_rank >= p.local_world_size) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_LOCALID=", p.local_rank,
                                                     " is not below the tasks per node (", p.local_world_size, ")"));
    }
    const char* list_var = Has(env, "SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                           : Has(env, "SLURM_NODELIST")   ? "SLURM_NODELIST"
                                                          : nullptr;
    if (list_var != nullptr) {
      auto host = FirstSlurmHost(env.at(list_var));
      if (!host.ok()) return absl::InvalidArgumentError(absl::StrCat(list_var, ": ", host.status().message()));
      p.master_addr = *host;
    } else if (!Has(env, "MASTER_ADDR")) {
      return absl::InvalidArgumentError("neither SLURM_JOB_NODELIST nor SLURM_NODELIST nor MASTER_ADDR is set");
    }
    if (Has(env, "SLURM_JOB_ID")) {
      p.run_id = env.at("SLURM_JOB_ID");
      p.master_port = PortFromJobId(p.run_id);
    }
    SL_RETURN_IF_ERROR(ReadMaster(env, p));  // MASTER_ADDR / MASTER_PORT win when set
    return p;
  }
};

class SingleProcessEnvironment : public ClusterEnvironment {
 public:
  std::string name() const override { return "single"; }
  bool Detected(const EnvMap&) const override { return true; }
  absl::StatusOr<ProcessPlacement> Read(const EnvMap& env) const override {
    ProcessPlacement p;
    p.launcher = name();
    SL_RETURN_IF_ERROR(ReadMaster(env, p));
    return p;
  }
};

}  // namespace

EnvMap ProcessEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

const std::vector<std::unique_ptr<ClusterEnvironment>>& AllEnvironments() {
  static const auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<ClusterEnvironment>>();
    v->push_back(std::make_unique<TorchrunEnvironment>());
    v->push_back(std::make_unique<MpiEnvironment>());
    v->push_back(std::make_unique<SlurmEnvironment>());
    v->push_back(std::make_unique<SingleProcessEnvironment>());
    return v;
  }();
  return *all;
}

absl::StatusOr<ProcessPlacement> DetectEnvironment(const EnvMap& env, const PlacementOverrides& overrides) {
  const ClusterEnvironment* chosen = nullptr;
  std::vector<std::string> names;
  for (const auto& e : AllEnvironments()) {
    names.push_back(e->name());
    const bool wanted = overrides.launcher.empty() || overrides.launcher == "auto"
                            ? e->Detected(env)
                            : overrides.launcher == e->name();
    if (wanted) {
      chosen = e.get();
      break;
    }
  }
  if (chosen == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown cluster environment '", overrides.launcher,
                                                   "'; known: auto, ", absl::StrJoin(names, ", ")));
  }
  auto read = chosen->Read(env);
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(chosen->name(), " environment: ", read.status().message()));
  }
  ProcessPlacement p = *std::move(read);
  if (overrides.world_size) p.world_size = *overrides.world_size;
  if (overrides.rank) p.rank = *overrides.rank;
  if (overrides.local_rank) p.local_rank = *overrides.local_rank;
  if (overrides.master_addr) p.master_addr = *overrides.master_addr;
  if (overrides.master_port) p.master_port = *overrides.master_port;
  if (p.world_size < 1 || p.world_size > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", p.world_size, " is outside [1, ", kMaxRanks, "]"));
  }
  if (p.rank < 0 || p.rank >= p.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", p.rank, " is outside [0, ", p.world_size - 1, "] for world size ", p.world_size));
  }
  if (p.master_port < 1 || p.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("master port ", p.master_port, " is outside [1, 65535]"));
  }
  if (p.master_addr.empty()) return absl::InvalidArgumentError("the master address is empty");
  return p;
}

std::string Describe(const ProcessPlacement& p) {
  return absl::StrCat(p.launcher, " rank ", p.rank, "/", p.world_size, " (local ", p.local_rank, "/",
                      p.local_world_size, ", node ", p.node_rank, "), store ", p.master_addr, ":", p.master_port,
                      p.store_mode == StoreMode::kAgentHosts ? absl::StrCat(" (agent's, prefix ", p.store_prefix, ")")
                                                             : std::string(" (hosted by rank 0)"),
                      p.restart_count > 0 ? absl::StrCat(", restart ", p.restart_count) : std::string());
}

std::optional<std::string> ShortKillGraceWarning(const ProcessPlacement& placement, const EnvMap& env,
                                                 std::chrono::milliseconds needed) {
  if (placement.launcher != "mpi") return std::nullopt;
  constexpr char kVariable[] = "OMPI_MCA_odls_base_sigkill_timeout";
  int64_t seconds = 1;  // Open MPI 4's default
  if (auto it = env.find(kVariable); it != env.end()) {
    if (!absl::SimpleAtoi(it->second, &seconds)) {
      return absl::StrCat("mpirun's ", kVariable, "=", it->second, " is not a number of seconds");
    }
  }
  const int64_t needed_s = (needed.count() + 999) / 1000;
  if (seconds >= needed_s) return std::nullopt;
  return absl::StrCat("mpirun sends SIGKILL ", seconds, " s after it stops the survivors of a lost worker "
                      "(odls_base_sigkill_timeout), before a rank can learn which peer was lost (up to ",
                      needed.count(), " ms): pass --mca odls_base_sigkill_timeout ", needed_s,
                      " to mpirun (or export ", kVariable, "=", needed_s, ") so every rank names it");
}

}  // namespace shardlight::lightning::cluster
