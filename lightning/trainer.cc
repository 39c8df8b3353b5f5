#include "lightning/trainer.h"

#include <ATen/core/grad_mode.h>

#include <iostream>
#include <optional>
#include <unordered_set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lightning/deferred_init.h"
#include "lightning/gate/collective_probe.h"
#include "lightning/metrics/metric.h"
#include "lightning/optimizer_step.h"
#include "lightning/autocast_compat.h"
#include "lightning/precision.h"
#include "lightning/validation_loop.h"
#include "lightning/state_dict_hooks.h"
#include "lightning/torch_checkpoint.h"
#include "lightning/strategies/ddp_strategy.h"
#include "lightning/strategies/gradient_reduction.h"
#include "sharded/agreement.h"
#include "sharded/checkpoint/async/async_checkpointer.h"
#include "sharded/checkpoint/format/checkpoint_reader.h"
#include "sharded/checkpoint/interop/dcp/dcp_checkpoint.h"
#include "sharded/checkpoint/roots/checkpoint_root.h"
#include "sharded/checkpoint/storage/default_storage.h"
#include "sharded/no_throw.h"
#include "sharded/plain_value.h"
#include "sharded/stable_hash.h"
#include "sharded/status_macros.h"

namespace shardlight::lightning {
namespace {

namespace ckpt = sharded::checkpoint;

// A removal log that prints each line, after `prefix`, on this rank's output
// in one write (an asynchronous save tells it from its own thread).
ckpt::RemovalLog PrintedAs(std::string prefix) {
  return [prefix = std::move(prefix)](const std::string& line) { std::cout << (prefix + line + "\n") << std::flush; };
}

// What checkpoint_dir holds, by rank 0's look, shared with all. An index
// entry that cannot be read is a plain checkpoint (whose load reports it),
// never "none": nothing is written or removed before that error.
enum class Layout { kNone, kPlain, kRoot, kDcp };
absl::StatusOr<Layout> CheckpointLayout(const std::string& dir, ckpt::Storage* storage, c10d::ProcessGroup& pg) {
  const Layout here = ckpt::IsCheckpointRoot(dir, storage)                               ? Layout::kRoot
                      : ckpt::HasCommittedCheckpoint(dir, storage)                         ? Layout::kPlain
                      : ckpt::dcp::IsDcpCheckpoint(dir, ckpt::StorageOrDefault(storage)) ? Layout::kDcp
                                                                                           : Layout::kNone;
  SL_ASSIGN_OR_RETURN(std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {absl::OkStatus(), 0, std::to_string(static_cast<int>(here))},
                                              {"resume"}));
  return static_cast<Layout>(all[0][0] - '0');
}

// What the committed checkpoint in `dir` holds besides the model, agreed
// across ranks: {optimizer state, the step, LR schedule state, ...}. A
// weights-only checkpoint (`ckpt import` of a torch.save or Lightning file)
// holds none. The step and the schedule's state are values since this
// release; a checkpoint of an earlier one holds them as one-element tensors
// (kTensor), and still resumes.
enum class Form : char { kNone = '0', kTensor = 't', kValue = 'v' };
struct SavedExtras {
  bool optimizer = false;
  Form step = Form::kNone;
  Form lr_schedule = Form::kNone;
  bool model_checkpoint = false;
  bool hyper_parameters = false;  // kHyperParametersKey
  // This rank's read: entries outside the Trainer's keys (TrainerKeyPrefixes),
  // which a resume leaves alone: their count and the first of them.
  int64_t others = 0;
  std::string other;
};
constexpr char kModelCheckpointPrefix[] = "callbacks.model_checkpoint.";
constexpr char kHyperParametersKey[] = "optimizer.hyper_parameters";
// The Trainer's own keys: what a resume loads (strictly).
const std::vector<std::string>& TrainerKeyPrefixes() {
  static const std::vector<std::string> prefixes = {"model.", "optimizer.", "trainer.", "lr_scheduler.",
                                                    kModelCheckpointPrefix};
  return prefixes;
}
bool IsTrainerKey(const std::string& key) {
  for (const std::string& p : TrainerKeyPrefixes()) {
    if (absl::StartsWith(key, p)) return true;
  }
  return false;
}
// Also refuses a checkpoint of another run (trainer.h, "Which run") unless
// `allow_different_run`; rank 0 then prints what differs.
absl::StatusOr<SavedExtras> CheckpointExtras(const std::string& dir, ckpt::Storage* storage, c10d::ProcessGroup& pg,
                                             const RunFingerprint& run, bool allow_different_run) {
  SavedExtras mine;
  std::string different;
  const absl::Status read = sharded::NoThrow([&]() -> absl::Status {
    SL_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader, ckpt::CheckpointReader::Open(dir, ckpt::StorageOrDefault(storage)));
    const auto other = [&](const std::string& key) {
      if (IsTrainerKey(key)) return;
      if (mine.others++ == 0) mine.other = key;
    };
    for (const ckpt::IndexTensor& t : reader.index().tensors) {
      mine.optimizer = mine.optimizer || absl::StartsWith(t.key, "optimizer.");
      if (t.key == "trainer.step") mine.step = Form::kTensor;
      if (absl::StartsWith(t.key, "lr_scheduler.")) mine.lr_schedule = Form::kTensor;
      mine.model_checkpoint = mine.model_checkpoint || absl::StartsWith(t.key, kModelCheckpointPrefix);
      other(t.key);
    }
    for (const ckpt::IndexValue& v : reader.index().values) {
      if (v.key == "trainer.step") mine.step = Form::kValue;
      if (absl::StartsWith(v.key, "lr_scheduler.")) mine.lr_schedule = Form::kValue;
      mine.hyper_parameters = mine.hyper_parameters || v.key == kHyperParametersKey;
      other(v.key);
    }
    different = DescribeRunDifference(reader.index(), run);
    if (!different.empty() && !allow_different_run) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint in '", dir, "' is from a different run: ", different,
          "; resume it anyway with allow_different_run (--allow_different_run), or use another checkpoint "
          "directory"));
    }
    return absl::OkStatus();
  });
  const std::string payload =
      absl::StrCat(mine.optimizer ? "1" : "0", std::string(1, static_cast<char>(mine.step)),
                   std::string(1, static_cast<char>(mine.lr_schedule)), mine.model_checkpoint ? "1" : "0",
                   mine.hyper_parameters ? "1" : "0");
  SL_ASSIGN_OR_RETURN(std::vector<std::string> all,
                      sharded::AgreeAndGather(pg, {read, sharded::StableHash(payload), payload},
                                              {absl::StrCat("resume from '", dir, "'"), "checkpoint contents"}));
  if (!different.empty() && pg.getRank() == 0) {
    std::cout << "resume: the checkpoint in " << dir << " is from a different run (" << different
              << "); resuming it as allow_different_run asks\n";
  }
  const std::string& agreed = all[0];
  SavedExtras out;
  out.optimizer = agreed[0] == '1';
  out.step = static_cast<Form>(agreed[1]);
  out.lr_schedule = static_cast<Form>(agreed[2]);
  out.model_checkpoint = agreed[3] == '1';
  out.hyper_parameters = agreed[4] == '1';
  out.others = mine.others;
  out.other = mine.other;
  return out;
}

// Every callback's hook on this rank, then agreement: one rank's failing
// callback fails every rank with its error.
template <typename F>
absl::Status CallbacksAgree(const std::vector<std::shared_ptr<Callback>>& callbacks, c10d::ProcessGroup& pg,
                            absl::string_view hook, F&& f) {
  absl::Status local = sharded::NoThrow([&]() -> absl::Status {
    for (const auto& c : callbacks) SL_RETURN_IF_ERROR(f(*c));
    return absl::OkStatus();
  });
  return sharded::Agree(pg, local, hook);
}

// Whether this Fit calls ConfigureShardedModel: not when an earlier Fit
// configured the module on this same group (its members are kept); a module
// configured on another group is refused, since its sharded members and
// metrics live on that group. Agreed, so every rank takes the same branch.
absl::StatusOr<bool> NeedsConfigure(const LightningModule& module,
                                    const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  const c10::intrusive_ptr<c10d::ProcessGroup>& before = module.configured_group();
  absl::Status mine = absl::OkStatus();
  if (before && before != pg) {
    mine = absl::FailedPreconditionError(absl::StrCat(
        module.name(), " was configured by an earlier Fit on another process group (", before->getSize(),
        " ranks) and its sharded members live there; fit a fresh module on this group (resume its state from a "
        "checkpoint)"));
  }
  const bool configure = !before;
  SL_RETURN_IF_ERROR(sharded::AgreeOn(*pg, mine.ok() ? absl::StatusOr<uint64_t>(configure ? 1 : 2) : mine,
                                      {"configure", "whether the module is already configured"}));
  return configure;
}

// The options a step uses, checked before anything collective: the same
// verdict on every rank (every rank has the same options).
absl::Status CheckStepOptions(const TrainerOptions& o) {
  if (!(o.gradient_clip_norm >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("gradient_clip_norm is ", o.gradient_clip_norm, "; want >= 0"));
  }
  if (!(o.gradient_clip_value >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("gradient_clip_value is ", o.gradient_clip_value, "; want >= 0"));
  }
  if (o.gradient_clip_norm > 0 && o.gradient_clip_value > 0) {
    return absl::InvalidArgumentError(absl::StrCat("gradient_clip_norm (", o.gradient_clip_norm,
                                                   ") and gradient_clip_value (", o.gradient_clip_value,
                                                   ") are both set; clip by one of them"));
  }
  if (o.accumulate_grad_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("accumulate_grad_batches is ", o.accumulate_grad_batches, "; want >= 1"));
  }
  return absl::OkStatus();
}

// The ModelCheckpoint among `callbacks` (null: none), and its conditions,
// checked before anything collective (trainer.h, model_checkpoint.h).
absl::StatusOr<ModelCheckpoint*> FindModelCheckpoint(const std::vector<std::shared_ptr<Callback>>& callbacks,
                                                     const TrainerOptions& o, bool validates) {
  ModelCheckpoint* found = nullptr;
  for (const auto& c : callbacks) {
    auto* mc = dynamic_cast<ModelCheckpoint*>(c.get());
    if (mc == nullptr) continue;
    if (found != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("two ModelCheckpoints among the callbacks (", found->Describe(),
                                                     ", ", mc->Describe(), "); the checkpoint root keeps one ranking"));
    }
    found = mc;
  }
  if (found == nullptr) return found;
  const std::string who = found->Describe();
  if (o.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(who + " needs checkpoint_dir: the checkpoint root that keeps its best steps");
  }
  if (!validates) {
    return absl::InvalidArgumentError(who + " needs validation: Fit with a validation source and val_check_interval");
  }
  if (o.keep_last > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " and keep_last (", o.keep_last, ") both choose which steps the checkpoint root keeps; set keep_last 0"));
  }
  if (o.async_checkpoint) {
    return absl::InvalidArgumentError(who + " with async_checkpoint is not supported yet; save synchronously");
  }
  return found;
}

// Validation options, checked before anything collective.
absl::Status CheckValidationOptions(const TrainerOptions& o, int64_t val_batches) {
  if (o.val_check_interval <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("val_check_interval is ", o.val_check_interval,
                                                   "; Fit with a validation source wants it >= 1"));
  }
  if (o.num_sanity_val_steps < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_sanity_val_steps is ", o.num_sanity_val_steps, "; want >= 0, or -1 for all"));
  }
  if (o.limit_val_batches < 0) {
    return absl::InvalidArgumentError(absl::StrCat("limit_val_batches is ", o.limit_val_batches, "; want >= 0"));
  }
  if (val_batches <= 0) {
    return absl::InvalidArgumentError(
        "limit_val_batches is 0 and the validation source has no steps_per_epoch: how many validation batches?");
  }
  return absl::OkStatus();
}

// A checkpoint without LR schedule state (from a run without one): the
// schedule continues at the resumed step, as rank 0 says.
void ResumeScheduleAtStep(LrSchedule& schedule, const at::Tensor& step, c10d::ProcessGroup& pg,
                          const std::string& dir) {
  schedule.set_last_step(step[0].item<int64_t>());
  if (pg.getRank() == 0) {
    std::cout << "resume: the checkpoint in " << dir << " holds no LR schedule state: the schedule continues at step "
              << step[0].item<int64_t>() << "\n";
  }
}

// Where an entry the Trainer saves as a value loads: a value, or the
// one-element tensor an earlier release saved it as.
absl::Status AddLoadTarget(sharded::StateDict& target, const std::string& key, Form form, c10::ScalarType dtype) {
  if (form == Form::kTensor) return target.Insert(key, at::zeros({1}, at::TensorOptions().dtype(dtype)));
  return target.InsertValue(key, sharded::PlainValue());
}

// That entry once loaded, as a value either way.
absl::StatusOr<sharded::PlainValue> LoadedScalar(const sharded::StateDict& target, const std::string& key) {
  if (const sharded::PlainValue* v = target.FindValue(key)) return *v;
  const sharded::StateValue* t = target.Find(key);
  const at::Tensor* dense = t == nullptr ? nullptr : std::get_if<at::Tensor>(t);
  if (dense == nullptr || dense->numel() != 1) return absl::InternalError("resume: no one-element " + key + " loaded");
  if (at::isFloatingType(dense->scalar_type())) return sharded::PlainValue::Float(dense->reshape({-1})[0].item<double>());
  return sharded::PlainValue::Int(dense->reshape({-1})[0].item<int64_t>());
}

// "momentum 0.9 saved, 0.5 now; ..." for the hyper-parameters that differ
// (the lr only without a schedule: one sets it from the step); "" if none.
std::string DescribeHyperParameterChange(const sharded::PlainValue& saved, const sharded::PlainValue& now,
                                         bool scheduled) {
  std::vector<std::string> lines;
  const std::vector<sharded::PlainValue>& items = now.items();
  for (size_t i = 0; now.kind() == sharded::PlainValue::Kind::kDict && i + 1 < items.size(); i += 2) {
    const std::string& name = items[i].text();
    if (scheduled && name == "lr") continue;
    const sharded::PlainValue* was = saved.Find(name);
    if (was == nullptr || *was != items[i + 1]) {
      lines.push_back(absl::StrCat(name, " ", was == nullptr ? "not saved" : was->Repr() + " saved", ", ",
                                   items[i + 1].Repr(), " now"));
    }
  }
  return absl::StrJoin(lines, "; ");
}

}  // namespace

absl::StatusOr<sharded::StateDict> TrainingStateDict(
LightningModule& module, Optimizer& optimizer,
                                                     const at::Tensor& step, LrSchedule* lr_schedule,
                                                     ModelCheckpoint* model_checkpoint) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict model, StateDictOf(module));
  sharded::StateDict dict;
  for (const auto& [key, value] : model.entries()) SL_RETURN_IF_ERROR(dict.Insert("model." + key, value));
  SL_RETURN_IF_ERROR(optimizer.AddStateTo(dict, "optimizer."));
  SL_RETURN_IF_ERROR(dict.InsertValue(kHyperParametersKey, optimizer.HyperParameters()));
  SL_RETURN_IF_ERROR(dict.InsertValue("trainer.step", sharded::PlainValue::Int(step[0].item<int64_t>())));
  if (lr_schedule != nullptr) SL_RETURN_IF_ERROR(lr_schedule->AddStateTo(dict, "lr_scheduler."));
  if (model_checkpoint != nullptr) SL_RETURN_IF_ERROR(model_checkpoint->AddStateTo(dict, kModelCheckpointPrefix));
  return dict;
}

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks)
    : options_(std::move(options)), callbacks_(std::move(callbacks)) {
  if (options_.log_every > 0) callbacks_.push_back(std::make_shared<ProgressCallback>(std::cout, options_.log_every));
}

absl::StatusOr<FitResult> Trainer::Fit(LightningModule& module, const DataSource& data,
                                       c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  return FitWith(module, data, nullptr, std::move(pg));
}

absl::StatusOr<FitResult> Trainer::Fit(LightningModule& module, const DataSource& data, const DataSource& val_data,
                                       c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  return FitWith(module, data, &val_data, std::move(pg));
}

absl::StatusOr<FitResult> Trainer::FitWith(LightningModule& module, const DataSource& data,
                                           const DataSource* val_data, c10::intrusive_ptr<c10d::ProcessGroup> pg) {
  if (!pg) return absl::InvalidArgumentError("Fit needs a process group");
  TrainState state{pg->getRank(), pg->getSize(), 0, options_.max_steps};
  SL_RETURN_IF_ERROR(CheckStepOptions(options_));
  SL_ASSIGN_OR_RETURN(const Precision precision, ParsePrecision(options_.precision));
  // The strategy's own options first: a contradiction is one on any build.
  if (options_.strategy != nullptr) SL_RETURN_IF_ERROR(options_.strategy->CheckPrecision(options_.precision));
  SL_RETURN_IF_ERROR(CheckPrecisionSupported(precision, options_.precision,
                                             options_.strategy != nullptr ? options_.strategy->name() : "ddp"));
  const bool autocast = precision == Precision::kBf16Mixed;
  // bf16-true: every floating tensor of a batch in bfloat16 (Lightning's convert_input).
  std::unique_ptr<DataSource> bf16_data, bf16_val;
  if (precision == Precision::kBf16True) {
    bf16_data = Bf16Batches(data);
    if (val_data != nullptr) bf16_val = Bf16Batches(*val_data);
  }
  const DataSource& train_data = bf16_data != nullptr ? *bf16_data : data;
  if (bf16_val != nullptr) val_data = bf16_val.get();
  const int64_t val_batches = options_.limit_val_batches > 0 ? options_.limit_val_batches
                              : val_data != nullptr        ? val_data->steps_per_epoch()
                                                           : 0;
  if (val_data != nullptr) SL_RETURN_IF_ERROR(CheckValidationOptions(options_, val_batches));
  SL_ASSIGN_OR_RETURN(model_checkpoint_, FindModelCheckpoint(callbacks_, options_, val_data != nullptr));
  const bool root = options_.keep_last > 0 || model_checkpoint_ != nullptr;  // checkpoint_dir is a root
  const int64_t accumulate = options_.accumulate_grad_batches;
  if (options_.max_epochs > 0 && data.steps_per_epoch() > 0) {
    state.max_steps = std::min(state.max_steps, options_.max_epochs * (data.steps_per_epoch() / accumulate));
  }
  // Setup: the collectives must work before any sharded state is created.
  SL_RETURN_IF_ERROR(ProbeCollectives(*pg, options_.probe_timeout));
  SL_ASSIGN_OR_RETURN(const bool configure, NeedsConfigure(module, pg));
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> lr_schedule;
  const std::shared_ptr<const Strategy> strategy =
      options_.strategy != nullptr ? options_.strategy : std::make_shared<DdpStrategy>();
  std::unique_ptr<StrategyRun> parallel;
  absl::Status configured = sharded::NoThrow([&]() -> absl::Status {
    const ShardedContext context{pg, state.rank, state.world_size, options_.seed, strategy->mesh()};
    if (configure) SL_RETURN_IF_ERROR(module.ConfigureShardedModel(context));
    // bf16-true: before the strategy lays the parameters out and the optimizer is built over them.
    if (precision == Precision::kBf16True) SL_RETURN_IF_ERROR(ConvertModuleToBf16(module));
    // Before the optimizer: it is built over what the strategy laid out.
    SL_ASSIGN_OR_RETURN(parallel, strategy->Setup(module, context));
    // Deferred parameters the strategy did not fill (ddp, model_parallel, fsdp's dense ones): whole.
    SL_RETURN_IF_ERROR(MaterializeDeferred(module));
    SL_ASSIGN_OR_RETURN(OptimizerConfig config, module.ConfigureOptimizersAndSchedule());
    optimizer = std::move(config.optimizer);
    lr_schedule = std::move(config.lr_schedule);
    if (optimizer == nullptr) return absl::InvalidArgumentError(module.name() + "::ConfigureOptimizers returned null");
    if (lr_schedule != nullptr) SL_RETURN_IF_ERROR(lr_schedule->Bind(*optimizer, state.max_steps));
    return absl::OkStatus();
  });
  SL_RETURN_IF_ERROR(sharded::Agree(*pg, configured, "configure"));
  module.configured_group_ = pg;
  SL_RETURN_IF_ERROR(metrics::BindMetrics(module, pg));  // metrics: reduce over pg, sharded states created
  const Trainables trainables = TrainablesOf(module);
  // Before a resume changes grown (cat) metric states: the same at every Fit.
  SL_ASSIGN_OR_RETURN(run_, FingerprintRun(module, options_.seed, options_.run_options));
  ckpt::SaveOptions save_options = options_.save_options;
  save_options.run = run_.record;
  // What a save removes is said on rank 0's output (unless the caller listens itself).
  if (!save_options.on_removed && pg->getRank() == 0) save_options.on_removed = PrintedAs("checkpoint: ");
  at::Tensor step = at::zeros({1}, at::kLong);
  lr_schedule_ = lr_schedule.get();
  if (model_checkpoint_ != nullptr) {
    model_checkpoint_->Bind(state.max_steps, options_.val_check_interval);
    model_checkpoint_->Reset();  // a resume restores its ranking
  }
  SL_ASSIGN_OR_RETURN(sharded::StateDict checkpoint_state,
                      TrainingStateDict(module, *optimizer, step, lr_schedule_, model_checkpoint_));
  SL_RETURN_IF_ERROR(parallel->UseCheckpointViews(checkpoint_state));
  strategy_run_ = parallel.get();
  parallel->UsePhaseTimes(options_.phase_times);

  const bool checkpoints = !options_.checkpoint_dir.empty();
  std::string resumed_from;
  if (checkpoints) {
    if (options_.keep_last < 0) {
      return absl::InvalidArgumentError(absl::StrCat("keep_last is ", options_.keep_last, "; want >= 0"));
    }
    // An s3:// checkpoint_dir this job cannot use (no or wrong credentials,
    // no bucket, a skewed clock) fails here on every rank, naming the
    // variable or S3's error, before a step is trained. Every rank joins the
    // agreement (a rank given its own storage probes nothing): a collective
    // some ranks skip would pair with another one on the others.
    const absl::Status probed = options_.save_options.storage == nullptr
                                    ? ckpt::ProbeLocation(options_.checkpoint_dir)
                                    : absl::OkStatus();
    SL_RETURN_IF_ERROR(sharded::Agree(*pg, probed, "checkpoint_dir"));
    SL_ASSIGN_OR_RETURN(const Layout layout,
                        CheckpointLayout(options_.checkpoint_dir, options_.save_options.storage.get(), *pg));
    if (layout == Layout::kRoot && !root) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint_dir '", options_.checkpoint_dir, "' is a checkpoint root (it has '", ckpt::kLatestFileName,
          "'), and keep_last is 0 (one plain checkpoint); set keep_last to train into the root"));
    }
    if (options_.resume && layout != Layout::kNone) {
      if (layout == Layout::kPlain) {
        SL_RETURN_IF_ERROR(Resume(module, *optimizer, step, *pg, options_.checkpoint_dir));
        resumed_from = options_.checkpoint_dir;
      } else if (layout == Layout::kDcp) {
        SL_RETURN_IF_ERROR(ResumeFromDcp(module, *optimizer, step, *pg, options_.checkpoint_dir));
        resumed_from = options_.checkpoint_dir;
      } else {
        SL_ASSIGN_OR_RETURN(resumed_from, ResumeFromRoot(module, *optimizer, step, *pg));
      }
      if (pg->getRank() == 0 && layout != Layout::kDcp) {
        // Leftovers of a save killed after its commit (best effort, as at a save).
        ckpt::RemoveUnreferencedFiles(resumed_from, options_.save_options.storage.get(), PrintedAs("resume: "))
            .IgnoreError();
      }
      state.start_step = step[0].item<int64_t>();
      if (lr_schedule_ != nullptr) SL_RETURN_IF_ERROR(lr_schedule_->Apply(*optimizer));
      SL_RETURN_IF_ERROR(CallbacksAgree(callbacks_, *pg, "OnLoadCheckpoint", [&](Callback& c) {
        return c.OnLoadCheckpoint(state, state.start_step, resumed_from);
      }));
    }
  }
  FitResult result;
  result.start_step = state.start_step;
  result.resumed_from = resumed_from;
  SL_RETURN_IF_ERROR(
      CallbacksAgree(callbacks_, *pg, "OnTrainStart", [&](Callback& c) { return c.OnTrainStart(state); }));
  const int64_t sanity_batches = options_.num_sanity_val_steps < 0
                                     ? val_batches
                                     : std::min(options_.num_sanity_val_steps, val_batches);
  if (val_data != nullptr && state.start_step < state.max_steps && sanity_batches > 0) {
    std::vector<std::string> monitored;
    for (const auto& c : callbacks_) {
      for (const std::string& key : c->MonitoredKeys()) monitored.push_back(key);
    }
    const CpuAutocast scope(autocast);
    SL_RETURN_IF_ERROR(CheckMonitoredKeys(module, *val_data, sanity_batches, *parallel, trainables,
                                          {state.start_step, state.rank, state.world_size, pg}, monitored));
  }

  // Asynchronous checkpoints: the save in flight, reported once it ended.
  std::unique_ptr<ckpt::AsyncCheckpointer> checkpointer;
  std::shared_ptr<ckpt::AsyncSaveHandle> in_flight;
  if (checkpoints && options_.async_checkpoint) {
    SL_ASSIGN_OR_RETURN(checkpointer, StartAsyncCheckpointer(*pg, save_options));
    checkpointer->Reserve(checkpoint_state);  // staging memory made resident while the first steps run
  }
  auto committed = [&]() -> absl::Status {
    if (in_flight == nullptr) return absl::OkStatus();
    const std::shared_ptr<ckpt::AsyncSaveHandle> ended = std::move(in_flight);
    SL_RETURN_IF_ERROR(ended->Wait());
    ++result.checkpoints_saved;
    return CallbacksAgree(callbacks_, *pg, "OnSaveCheckpoint", [&](Callback& c) {
      return c.OnSaveCheckpoint(state, ended->step(), ended->dir());
    });
  };

  int64_t last_saved = -1;
  auto save = [&](int64_t done) -> absl::Status {
    if (done == last_saved) return absl::OkStatus();  // a ModelCheckpoint's save of this step came first
    // metrics: rebuilt so metric states are synced and grown (cat) states saved at their current size.
    SL_ASSIGN_OR_RETURN(checkpoint_state, TrainingStateDict(module, *optimizer, step, lr_schedule_, model_checkpoint_));
    SL_RETURN_IF_ERROR(parallel->UseCheckpointViews(checkpoint_state));
    last_saved = done;
    if (checkpointer != nullptr) {
      SL_RETURN_IF_ERROR(committed());
      SL_ASSIGN_OR_RETURN(in_flight, checkpointer->Save(checkpoint_state, done));
      return CallbacksAgree(callbacks_, *pg, "OnSaveStarted", [&](Callback& c) {
        return c.OnSaveStarted(state, done, in_flight->dir());
      });
    }
    std::string saved_in = options_.checkpoint_dir;
    if (root) {
      ckpt::RootSaveOptions root_options;
      root_options.keep_last = options_.keep_last;
      root_options.save = save_options;
      if (model_checkpoint_ != nullptr) {
        // The best steps, agreed before anything is written: rank 0 deletes the others after the commit.
        const std::vector<int64_t> best = model_checkpoint_->BestSteps();
        const std::string kept = best.empty() ? "no step" : absl::StrCat("steps ", absl::StrJoin(best, ", "));
        SL_RETURN_IF_ERROR(sharded::AgreeOn(*pg, absl::StatusOr<uint64_t>(sharded::StableHash(kept)),
                                            {absl::StrCat("checkpoint save of step ", done), "the best steps"}));
        root_options.keep_steps = best;
        root_options.keep_why = absl::StrCat(model_checkpoint_->Describe(), " keeps ", kept, " and the newest");
      }
      SL_RETURN_IF_ERROR(ckpt::SaveToCheckpointRoot(checkpoint_state, options_.checkpoint_dir, done, *pg, root_options));
      saved_in = ckpt::JoinPath(options_.checkpoint_dir, ckpt::StepDirName(done));
    } else {
      SL_RETURN_IF_ERROR(ckpt::SaveCheckpoint(checkpoint_state, options_.checkpoint_dir, *pg, save_options));
    }
    ++result.checkpoints_saved;
    return CallbacksAgree(callbacks_, *pg, "OnSaveCheckpoint", [&](Callback& c) {
      return c.OnSaveCheckpoint(state, done, saved_in);
    });
  };

  for (int64_t s = state.start_step; s < state.max_steps; ++s) {
    std::optional<PhaseTimes::StepScope> timed_step(options_.phase_times);  // to the loss allreduce
    optimizer->ZeroGrad();
    // Step 1: data, TrainingStep and backward; agreed in the strategy's gradient reduction.
    SL_RETURN_IF_ERROR(parallel->BeforeStep(s));
    at::Tensor loss;
    const absl::Status local =
        AccumulateMicroBatches(module, train_data, {s, state.rank, state.world_size, pg}, accumulate, &loss, autocast);
    SL_RETURN_IF_ERROR(parallel->ReduceGradients(trainables, local, absl::StrCat("training step ", s)));
    std::optional<PhaseTimes::Scope> timed_optimizer(std::in_place, options_.phase_times, Phase::kOptimizer);
    if (options_.gradient_clip_norm > 0) {
      SL_RETURN_IF_ERROR(
          parallel->ClipGradients(trainables, options_.gradient_clip_norm, absl::StrCat("gradient clipping at step ", s))
              .status());
    }
    if (options_.gradient_clip_value > 0) parallel->ClipGradientValues(trainables, options_.gradient_clip_value);
    // Step 2: the optimizer, then the LR schedule; agreed in the loss allreduce.
    result.lrs.push_back(optimizer->lr());
    const absl::Status stepped = sharded::NoThrow([&] {
      optimizer->Step();
      return lr_schedule_ != nullptr ? lr_schedule_->Step(*optimizer) : absl::OkStatus();
    });
    timed_optimizer.reset();
    // With the loss: how many ranks' background save has ended, so that every
    // rank learns of a commit at the same step without a collective of its own.
    const double save_ended = in_flight != nullptr && in_flight->Done() ? 1.0 : 0.0;
    at::Tensor global_loss = at::cat({loss.detach().to(at::kDouble).reshape({1}), at::full({1}, save_ended, at::kDouble)});
    c10d::ProcessGroup& loss_group = parallel->loss_group();
    SL_RETURN_IF_ERROR(AllreduceWithVerdict(loss_group, global_loss, stepped, absl::StrCat("optimizer step ", s)));
    timed_step.reset();
    const int64_t done = s + 1;
    step.fill_(done);
    result.losses.push_back(global_loss[0].item<double>());
    if (global_loss[1].item<double>() == static_cast<double>(loss_group.getSize())) SL_RETURN_IF_ERROR(committed());
    // Step 3: the callbacks; agreed.
    SL_RETURN_IF_ERROR(CallbacksAgree(callbacks_, *pg, "OnStepEnd", [&](Callback& c) {
      return c.OnStepEnd(state, done, result.losses.back());
    }));
    if (val_data != nullptr && done % options_.val_check_interval == 0) {
      absl::StatusOr<std::map<std::string, double>> validated;
      {
        const CpuAutocast scope(autocast);  // bf16-mixed: ValidationStep under autocast too
        validated = RunValidation(module, *val_data, val_batches, *parallel, trainables,
                                  {done, state.rank, state.world_size, pg});
      }
      SL_ASSIGN_OR_RETURN(auto metrics, std::move(validated));
      result.validations.emplace_back(done, metrics);
      SL_RETURN_IF_ERROR(CallbacksAgree(callbacks_, *pg, "OnValidationEnd", [&](Callback& c) {
        return c.OnValidationEnd(state, done, metrics);
      }));
      bool stop = false;
      for (const auto& c : callbacks_) stop = stop || c->ShouldStop();
      SL_RETURN_IF_ERROR(sharded::AgreeOn(*pg, absl::StatusOr<uint64_t>(stop ? 1 : 2), {"early stopping", "whether to stop"}));
      // A step that entered the ModelCheckpoint's best k is saved now.
      if (model_checkpoint_ != nullptr && model_checkpoint_->Entered(done)) SL_RETURN_IF_ERROR(save(done));
      if (stop && done < state.max_steps) {
        result.stopped_early = true;
        state.max_steps = done;  // the save after the loop is this step's
        if (pg->getRank() == 0) std::cout << "stopping early after step " << done << " (a callback's ShouldStop)\n";
        break;
      }
    }
    // The save after the last step follows the loop (also when the loop ran no step).
    if (checkpoints && done != state.max_steps &&
        CheckpointsAfterStep(done, state.max_steps, options_.checkpoint_every)) {
      SL_RETURN_IF_ERROR(save(done));
    }
  }
  if (checkpoints && options_.save_last && state.start_step < state.max_steps) SL_RETURN_IF_ERROR(save(state.max_steps));
  SL_RETURN_IF_ERROR(committed());  // Fit returns once the last save is committed
  result.end_step = std::max(state.start_step, state.max_steps);
  return result;
}

absl::StatusOr<std::unique_ptr<ckpt::AsyncCheckpointer>> Trainer::StartAsyncCheckpointer(
    c10d::ProcessGroup& pg, const ckpt::SaveOptions& save) {
  const absl::Status have_groups =
      options_.groups != nullptr
          ? absl::OkStatus()
          : absl::InvalidArgumentError("async_checkpoint needs TrainerOptions::groups (RankContext::groups or "
                                       "DistributedContext::groups()) to make the checkpointer's own process group");
  SL_RETURN_IF_ERROR(sharded::Agree(pg, have_groups, "async checkpoint setup"));
  SL_ASSIGN_OR_RETURN(auto group, options_.groups->Make("async_checkpoint"));
  ckpt::AsyncCheckpointOptions options;
  options.staging_budget_bytes = options_.async_staging_bytes;
  options.keep_last = options_.keep_last;
  options.save = save;  // with the run record: an async checkpoint is refused to another run too
  return ckpt::AsyncCheckpointer::Create(options_.checkpoint_dir, std::move(group), std::move(options));
}

absl::StatusOr<std::string> Trainer::ResumeFromRoot(LightningModule& module, Optimizer& optimizer,
                                                    const at::Tensor& step, c10d::ProcessGroup& pg) {
  SL_ASSIGN_OR_RETURN(const ckpt::RootLoadResult loaded,
                      ckpt::LoadFromCheckpointRoot(options_.checkpoint_dir, pg, options_.save_options.storage.get(),
                                                   [&](const std::string& dir) {
                                                     return Resume(module, optimizer, step, pg, dir);
                                                   }));
  if (pg.getRank() == 0 && !loaded.fallbacks.empty()) {
    for (const std::string& line : loaded.fallbacks) std::cout << "resume: " << line << "\n";
    std::cout << "resume: loaded step " << loaded.step << " from " << loaded.dir << "\n";
  }
  return loaded.dir;
}

// The module's state dict as fresh tensors of its layout: `model` under its
// own keys, the same tensors in `target` under "model.".
absl::Status FreshModelState(LightningModule& module, sharded::StateDict* model, sharded::StateDict* target) {
  SL_ASSIGN_OR_RETURN(sharded::StateDict current, StateDictOf(module));
  for (const auto& [key, value] : current.entries()) {
    sharded::StateValue fresh;
    if (const auto* dense = std::get_if<at::Tensor>(&value)) {
      fresh = at::empty_like(dense->detach());
    } else {
      fresh = std::get<sharded::ShardedTensor>(value).ZerosLike(/*requires_grad=*/false);
    }
    SL_RETURN_IF_ERROR(model->Insert(key, fresh));
    SL_RETURN_IF_ERROR(target->Insert("model." + key, fresh));
  }
  return absl::OkStatus();
}

absl::Status Trainer::ResumeFromDcp(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                                    c10d::ProcessGroup& pg, const std::string& dir) {
  // Under torch's own names (dcp.save of get_model_state_dict / get_optimizer_state_dict): torch_checkpoint.h.
  SL_ASSIGN_OR_RETURN(const DcpListing listing, ListDcpCheckpoint(dir, options_.save_options.storage.get(), pg));
  if (HasTorchOptimizerNames(listing.Keys())) {
    ckpt::LoadOptions load;
    load.storage = options_.save_options.storage;
    SL_RETURN_IF_ERROR(LoadTorchNamedDcp(module, optimizer, step, pg, dir, listing, load));
    if (lr_schedule_ != nullptr) {
      ResumeScheduleAtStep(*lr_schedule_, step, pg, dir);
      SL_RETURN_IF_ERROR(lr_schedule_->Apply(optimizer));  // the rate of the resumed step, compared below
    }
    SL_RETURN_IF_ERROR(CheckTorchParamGroups(listing, module, optimizer, pg.getRank(), dir, options_.allow_different_run));
    if (pg.getRank() == 0) {
      std::cout << "resume: loaded step " << step[0].item<int64_t>() << " from the PyTorch DCP checkpoint in " << dir
                << " (torch's names: model., optim.state., optim.param_groups.)\n";
    }
    return absl::OkStatus();
  }
  sharded::StateDict model;
  sharded::StateDict target;
  SL_RETURN_IF_ERROR(FreshModelState(module, &model, &target));
  // What the checkpoint holds, from the listing (read once, by rank 0, and
  // shared): its tensor keys and its step (an int value "trainer.step",
  // "step" or "global_step", the first of these names found).
  std::unordered_set<std::string> keys;
  for (const NamedTensor& t : listing.tensors) keys.insert(t.key);
  std::optional<int64_t> saved_step;
  for (const char* name : {"trainer.step", "step", "global_step"}) {
    for (const auto& [key, value] : listing.values) {
      const bool is_int = value.kind() == sharded::PlainValue::Kind::kInt ||
                          value.kind() == sharded::PlainValue::Kind::kBool;
      if (!saved_step.has_value() && key == name && is_int) saved_step = value.integer();
    }
  }
  std::vector<std::string> missing;
  for (const auto& [key, value] : target.entries()) {
    if (keys.count(key) == 0) missing.push_back(key);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the PyTorch DCP checkpoint in '", dir, "' lacks ", missing.size(), " of the model's ", target.size(),
        " entries (the module's state dict under \"model.\"), e.g. '", missing.front(), "'"));
  }
  // The optimizer's state where the checkpoint holds it under exactly its
  // keys; otherwise it starts fresh, and rank 0 says so.
  sharded::StateDict optimizer_state;
  SL_RETURN_IF_ERROR(optimizer.AddStateTo(optimizer_state, "optimizer."));
  std::vector<std::string> skipped;
  for (const auto& [key, value] : optimizer_state.entries()) {
    if (keys.count(key) == 0) skipped.push_back(key);
  }
  if (skipped.empty()) {
    for (const auto& [key, value] : optimizer_state.entries()) SL_RETURN_IF_ERROR(target.Insert(key, value));
  } else if (pg.getRank() == 0) {
    std::cout << "resume: the PyTorch DCP checkpoint in " << dir << " holds no optimizer state under this optimizer's "
              << optimizer_state.size() << " keys (e.g. '" << skipped.front()
              << "'): skipped, the optimizer starts fresh\n";
  }
  // The step as an int64 [1] tensor "trainer.step" (what this Trainer saves) loads like the state.
  const bool step_tensor = !saved_step.has_value() && keys.count("trainer.step") > 0;
  if (step_tensor) SL_RETURN_IF_ERROR(target.Insert("trainer.step", step));
  if (saved_step.has_value()) {
    if (*saved_step < 0) {
      return absl::InvalidArgumentError(absl::StrCat("the PyTorch DCP checkpoint in '", dir, "' has step ", *saved_step));
    }
    step.fill_(*saved_step);
  } else if (!step_tensor && pg.getRank() == 0) {
    std::cout << "resume: the PyTorch DCP checkpoint in " << dir
              << " has no step (an int \"step\", \"trainer.step\" or \"global_step\"): training starts at step 0\n";
  }
  ckpt::LoadOptions load;
  load.strict = false;  // its other entries (another optimizer's state, metrics) are not this run's
  load.storage = options_.save_options.storage;
  if (strategy_run_ != nullptr) SL_RETURN_IF_ERROR(strategy_run_->UseCheckpointViews(target));
  SL_RETURN_IF_ERROR(ckpt::LoadCheckpoint(target, dir, pg, load));
  if (strategy_run_ != nullptr) SL_RETURN_IF_ERROR(strategy_run_->CompleteCheckpointLoad("resume"));
  const absl::Status loaded =
      sharded::NoThrow([&] { return LoadStateDict(module, std::move(model), /*strict=*/true).status(); });
  SL_RETURN_IF_ERROR(sharded::Agree(pg, loaded, "resume"));
  if (lr_schedule_ != nullptr) ResumeScheduleAtStep(*lr_schedule_, step, pg, dir);
  if (pg.getRank() == 0) {
    std::cout << "resume: loaded step " << step[0].item<int64_t>() << " from the PyTorch DCP checkpoint in " << dir
              << "\n";
  }
  return absl::OkStatus();
}

absl::Status Trainer::Resume(LightningModule& module, Optimizer& optimizer, const at::Tensor& step,
                             c10d::ProcessGroup& pg, const std::string& dir) {
  // metrics: cat states take their sizes from the checkpoint before the dict to fill is built.
  SL_RETURN_IF_ERROR(metrics::PrepareCheckpointLoad(module, "model.", dir, pg, options_.save_options.storage));
  // The model's entries load into fresh tensors of the module's layout and
  // reach the module through LoadStateDict, so its load hooks run; the
  // optimizer's state loads in place; the step and the schedule's state
  // load as values (or the tensors earlier releases saved) and are set after.
  sharded::StateDict model;
  sharded::StateDict target;
  SL_RETURN_IF_ERROR(FreshModelState(module, &model, &target));
  SL_ASSIGN_OR_RETURN(const SavedExtras extras, CheckpointExtras(dir, options_.save_options.storage.get(), pg, run_,
                                                                 options_.allow_different_run));
  if (extras.optimizer) {
    SL_RETURN_IF_ERROR(optimizer.AddStateTo(target, "optimizer."));
  } else if (pg.getRank() == 0) {
    std::cout << "resume: the checkpoint in " << dir
              << " holds no optimizer state (weights only): the optimizer starts fresh\n";
  }
  if (extras.hyper_parameters) SL_RETURN_IF_ERROR(target.InsertValue(kHyperParametersKey, sharded::PlainValue()));
  if (extras.step != Form::kNone) SL_RETURN_IF_ERROR(AddLoadTarget(target, "trainer.step", extras.step, at::kLong));
  const bool schedule = lr_schedule_ != nullptr && extras.lr_schedule != Form::kNone;
  if (schedule) {
    SL_RETURN_IF_ERROR(AddLoadTarget(target, "lr_scheduler.last_step", extras.lr_schedule, at::kLong));
    SL_RETURN_IF_ERROR(AddLoadTarget(target, "lr_scheduler.base_lr", extras.lr_schedule, at::kDouble));
  }
  if (model_checkpoint_ != nullptr && extras.model_checkpoint) {
    SL_RETURN_IF_ERROR(model_checkpoint_->AddStateTo(target, kModelCheckpointPrefix));
  }
  ckpt::LoadOptions load;
  load.verify_before_write = true;  // a damaged checkpoint changes nothing
  load.storage = options_.save_options.storage;
  load.key_prefixes = TrainerKeyPrefixes();  // strict within them; an import's other entries are left alone
  // HSDP: each replicated shard loads once, into its writer, then reaches the other replicas.
  if (strategy_run_ != nullptr) SL_RETURN_IF_ERROR(strategy_run_->UseCheckpointViews(target));
  SL_RETURN_IF_ERROR(ckpt::LoadCheckpoint(target, dir, pg, load));
  if (strategy_run_ != nullptr) SL_RETURN_IF_ERROR(strategy_run_->CompleteCheckpointLoad("resume"));
  if (extras.others > 0 && pg.getRank() == 0) {
    std::cout << "resume: " << extras.others << " entries of the checkpoint in " << dir
              << " are not the Trainer's (e.g. '" << extras.other << "'): not loaded\n";
  }
  const absl::Status restored = sharded::NoThrow([&]() -> absl::Status {
    if (extras.step != Form::kNone) {
      SL_ASSIGN_OR_RETURN(const sharded::PlainValue saved, LoadedScalar(target, "trainer.step"));
      if (saved.kind() != sharded::PlainValue::Kind::kInt || saved.integer() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the checkpoint in '", dir, "' has trainer.step ", saved.Repr(), "; want an int >= 0"));
      }
      step.fill_(saved.integer());
    }
    if (schedule) {
      SL_ASSIGN_OR_RETURN(const sharded::PlainValue last_step, LoadedScalar(target, "lr_scheduler.last_step"));
      SL_ASSIGN_OR_RETURN(const sharded::PlainValue base_lr, LoadedScalar(target, "lr_scheduler.base_lr"));
      absl::Status s = lr_schedule_->RestoreState(last_step, base_lr);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("the checkpoint in '", dir, "': ", s.message()));
    }
    return absl::OkStatus();
  });
  SL_RETURN_IF_ERROR(sharded::Agree(pg, restored, "resume"));
  const absl::Status loaded =
      sharded::NoThrow([&] { return LoadStateDict(module, std::move(model), /*strict=*/true).status(); });
  SL_RETURN_IF_ERROR(sharded::Agree(pg, loaded, "resume"));
  if (extras.hyper_parameters && pg.getRank() == 0) {
    const std::string differ = DescribeHyperParameterChange(*target.FindValue(kHyperParametersKey),
                                                            optimizer.HyperParameters(), lr_schedule_ != nullptr);
    if (!differ.empty()) {
      std::cout << "resume: the optimizer's hyper-parameters differ from those saved in " << dir << " (" << differ
                << "): this run's are used\n";
    }
  }
  if (lr_schedule_ != nullptr && extras.lr_schedule == Form::kNone) ResumeScheduleAtStep(*lr_schedule_, step, pg, dir);
  if (model_checkpoint_ != nullptr) {
    model_checkpoint_->RestoreFromState();
    if (!extras.model_checkpoint && pg.getRank() == 0) {
      std::cout << "resume: the checkpoint in " << dir << " holds no ModelCheckpoint state: "
                << model_checkpoint_->Describe() << " ranks from this run's validations only\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace shardlight::lightning
