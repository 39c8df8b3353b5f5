#include "sharded/checkpoint/checkpoint_testing.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "sharded/checkpoint/storage/fault_injecting_storage.h"
#include "sharded/status_macros.h"
#include "sharded/tensor_region.h"

namespace shardlight::sharded::checkpoint::testing {
namespace {

constexpr int kSentinel = 7;

at::Tensor Sentinel(const at::Tensor& like) {
  return at::full_like(like, like.scalar_type() == c10::ScalarType::Bool ? 1 : kSentinel);
}

}  // namespace

std::vector<TensorSpec> UnevenModel(int world) {
  return {{"layer.weight", {37, 11}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"layer.bias", {11}, c10::ScalarType::BFloat16, std::nullopt},
          {"embedding", {37, 6}, c10::ScalarType::Half, ChunkShardingSpec::OnRanks(world > 1 ? 1 : 0, world)},
          {"empty", {2, 3}, c10::ScalarType::Float, ChunkShardingSpec::OnRanks(0, world)},
          {"step", {}, c10::ScalarType::Long, std::nullopt}};
}

simulate::ClusterOptions Options() {
  simulate::ClusterOptions o;
  o.collective_timeout = std::chrono::seconds(15);
  return o;
}

std::string FreshDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir = std::filesystem::path(root ? root : "/tmp") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string BrokenEntryName(BrokenEntry kind) {
  switch (kind) {
    case BrokenEntry::kDanglingLink: return "dangling_link";
    case BrokenEntry::kLinkLoop: return "link_loop";
    case BrokenEntry::kDirectory: return "directory";
    case BrokenEntry::kFifo: return "fifo";
    case BrokenEntry::kNotAnIndex: return "not_an_index";
    case BrokenEntry::kUnreadable: return "unreadable";
  }
  return "unknown";
}

std::string BreakEntry(const std::string& path, BrokenEntry kind) {
  namespace fs = std::filesystem;
  if (kind == BrokenEntry::kUnreadable) return "Permission denied";
  fs::remove(path);
  switch (kind) {
    case BrokenEntry::kDanglingLink:
      fs::create_symlink(path + ".gone", path);
      return "dangling symbolic link";
    case BrokenEntry::kLinkLoop:
      fs::create_symlink(fs::path(path).filename(), path);  // points at itself
      return "symbolic-link loop";
    case BrokenEntry::kDirectory:
      fs::create_directory(path);
      return "is a directory, not a regular file";
    case BrokenEntry::kFifo:
      if (::mkfifo(path.c_str(), 0644) != 0) return "mkfifo failed";
      return "is a FIFO, not a regular file";
    case BrokenEntry::kNotAnIndex:
      std::ofstream(path) << R"({"format": "notes", "version": 1})";
      return "not a shardlight checkpoint index";
    case BrokenEntry::kUnreadable:
      break;
  }
  return "unknown kind";
}

std::shared_ptr<Storage> UnreadableThrough(const std::string& path) {
  return std::make_shared<FaultInjectingStorage>(PosixStorage(), [path](StorageOp op, const std::string& p) {
    if (op == StorageOp::kOpenForRead && p == path) {
      return absl::PermissionDeniedError(absl::StrCat("cannot open '", p, "': Permission denied"));
    }
    return absl::OkStatus();
  });
}

std::map<std::string, std::string> DirectorySnapshot(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::path& p = it->path();
    const std::string name = p.lexically_relative(dir).string();
    const fs::file_status st = fs::symlink_status(p);
    if (fs::is_symlink(st)) {
      out[name] = "link to " + fs::read_symlink(p).string();
    } else if (fs::is_directory(st)) {
      out[name] = "directory";
    } else if (fs::is_fifo(st)) {
      out[name] = "fifo";
    } else {
      out[name] = FileContents(p.string());
    }
  }
  return out;
}

at::Tensor KeyedReference(const std::string& key, const std::vector<int64_t>& sizes, c10::ScalarType dtype, int salt) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  const int64_t shift = static_cast<int64_t>(std::hash<std::string>{}(key) % 9973) * 17 + salt * 1000;
  at::Tensor i = at::arange(n, at::kLong) + shift;
  switch (dtype) {
    case c10::ScalarType::Bool:
      return ((i * 7 + 3) % 5 < 2).view(sizes);
    case c10::ScalarType::BFloat16:
      return (i % 251 - 125).to(dtype).view(sizes);  // exact in bfloat16
    case c10::ScalarType::Long:
      return (i * 1000003 + 17).view(sizes);
    case c10::ScalarType::Float:
      return ((i % 1000000).to(dtype) * 0.5 + 0.25).view(sizes);  // exact in float32
    default:
      return (i.to(dtype) * 0.5 + 0.25).view(sizes);
  }
}

absl::StatusOr<StateDict> MakeState(const std::vector<TensorSpec>& specs, int salt,
                                    const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  StateDict state;
  for (const TensorSpec& t : specs) {
    const at::Tensor reference = KeyedReference(t.key, t.sizes, t.dtype, std::max(salt, 0));
    if (!t.spec) {
      SL_RETURN_IF_ERROR(state.Insert(t.key, salt >= 0 ? reference.clone() : Sentinel(reference)));
      continue;
    }
    TensorProperties props;
    props.dtype = t.dtype;
    auto meta = BuildMetadata(*t.spec, t.sizes, props, pg->getSize());
    if (!meta.ok()) return absl::InternalError(absl::StrCat(t.key, ": ", meta.status().message()));
    std::vector<Shard> shards;
    for (int i : meta->ShardsOnRank(pg->getRank())) {
      const ShardMetadata& m = meta->shards[i];
      at::Tensor values = RegionView(reference, Box::Whole(t.sizes), m).clone();
      shards.push_back({salt >= 0 ? values : Sentinel(values), m});
    }
    auto st = ShardedTensor::InitFromLocalShardsAndGlobalMetadata(std::move(shards), *meta, pg);
    if (!st.ok()) return absl::InternalError(absl::StrCat(t.key, ": ", st.status().message()));
    SL_RETURN_IF_ERROR(state.Insert(t.key, *std::move(st)));
  }
  return state;
}

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;  // empty tensors may have no storage (memcmp of null is UB)
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

absl::Status CheckState(const StateDict& state, int salt) {
  for (const auto& [key, value] : state.entries()) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      if (!BitEqual(*dense, KeyedReference(key, dense->sizes().vec(), dense->scalar_type(), salt))) {
        return absl::InternalError(absl::StrCat("dense key '", key, "' differs from the reference"));
      }
      continue;
    }
    const ShardedTensor& st = std::get<ShardedTensor>(value);
    const at::Tensor reference = KeyedReference(key, st.sizes(), st.dtype(), salt);
    for (const Shard& s : st.local_shards()) {
      if (!BitEqual(s.tensor, RegionView(reference, Box::Whole(st.sizes()), s.metadata))) {
        return absl::InternalError(absl::StrCat("key '", key, "' shard (", s.metadata.ToString(), ") differs"));
      }
    }
  }
  return absl::OkStatus();
}

bool AllSentinel(const StateDict& state) {
  auto check = [](const at::Tensor& t) { return BitEqual(t, Sentinel(t)); };
  for (const auto& [key, value] : state.entries()) {
    if (const at::Tensor* dense = std::get_if<at::Tensor>(&value)) {
      if (!check(*dense)) return false;
      continue;
    }
    for (const Shard& s : std::get<ShardedTensor>(value).local_shards()) {
      if (!check(s.tensor)) return false;
    }
  }
  return true;
}

}  // namespace shardlight::sharded::checkpoint::testing
