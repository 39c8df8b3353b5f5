// The mapping between torch's names for a training state and the run's
// (torch_names.h): plans, the errors naming a key of another model, the one
// step count, param_groups written and compared.
#include "lightning/torch_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace shardlight::lightning {
namespace {

using sharded::PlainValue;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A model of two parameters (a matrix and a bias) and a buffer; AdamW's state.
RunNames LmRun() {
  return {{{"fc.weight", "Float", {3, 4}}, {"fc.bias", "Float", {3}}, {"norm.count", "Long", {}}},
          {"fc.weight", "fc.bias"},
          {"exp_avg", "exp_avg_sq"}};
}

// What dcp.save of torch's get_model_state_dict / get_optimizer_state_dict holds for LmRun().
std::vector<NamedTensor> TorchSave() {
  return {{"model.fc.weight", "Float", {3, 4}},
          {"model.fc.bias", "Float", {3}},
          {"model.norm.count", "Long", {}},
          {"optim.state.fc.weight.exp_avg", "Float", {3, 4}},
          {"optim.state.fc.weight.exp_avg_sq", "Float", {3, 4}},
          {"optim.state.fc.weight.step", "Float", {}},
          {"optim.state.fc.bias.exp_avg", "Float", {3}},
          {"optim.state.fc.bias.exp_avg_sq", "Float", {3}},
          {"optim.state.fc.bias.step", "Float", {}}};
}

std::vector<NamedTensor> Without(std::vector<NamedTensor> entries, const std::string& key) {
  entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const NamedTensor& t) { return t.key == key; }),
                entries.end());
  return entries;
}

TEST(TorchNamesTest, TellsTorchNamesFromShardlights) {
  EXPECT_TRUE(HasTorchOptimizerNames({"model.fc.weight", "optim.state.fc.weight.exp_avg"}));
  EXPECT_TRUE(HasTorchOptimizerNames({"optim.param_groups.0.lr"}));
  EXPECT_FALSE(HasTorchOptimizerNames({"model.fc.weight", "optimizer.fc.weight.exp_avg", "trainer.step"}));
}

TEST(TorchNamesTest, PlansEveryTensorUnderTheRunsName) {
  auto plan = PlanTorchLoad(TorchSave(), {"optim.param_groups.0.lr", "optim.param_groups.0.params"}, LmRun());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->tensors,
              ElementsAre(Pair("model.fc.weight", "model.fc.weight"), Pair("model.fc.bias", "model.fc.bias"),
                          Pair("model.norm.count", "model.norm.count"),
                          Pair("optim.state.fc.weight.exp_avg", "optimizer.fc.weight.exp_avg"),
                          Pair("optim.state.fc.weight.exp_avg_sq", "optimizer.fc.weight.exp_avg_sq"),
                          Pair("optim.state.fc.bias.exp_avg", "optimizer.fc.bias.exp_avg"),
                          Pair("optim.state.fc.bias.exp_avg_sq", "optimizer.fc.bias.exp_avg_sq")));
  EXPECT_THAT(plan->steps, ElementsAre("optim.state.fc.weight.step", "optim.state.fc.bias.step"));
}

TEST(TorchNamesTest, OptimizerStateOfAnotherModelNamesTheKey) {
  auto missing = PlanTorchLoad(Without(TorchSave(), "optim.state.fc.bias.exp_avg_sq"), {}, LmRun());
  EXPECT_THAT(missing.status().ToString(), HasSubstr("lacks 'optim.state.fc.bias.exp_avg_sq'"));
  auto no_step = PlanTorchLoad(Without(TorchSave(), "optim.state.fc.weight.step"), {}, LmRun());
  EXPECT_THAT(no_step.status().ToString(), HasSubstr("lacks 'optim.state.fc.weight.step'"));
  auto no_model = PlanTorchLoad(Without(TorchSave(), "model.fc.bias"), {}, LmRun());
  EXPECT_THAT(no_model.status().ToString(), HasSubstr("lacks 'model.fc.bias'"));

  std::vector<NamedTensor> extra = TorchSave();
  extra.push_back({"optim.state.fc2.weight.exp_avg", "Float", {3, 4}});
  auto extra_param = PlanTorchLoad(extra, {}, LmRun());
  EXPECT_THAT(extra_param.status().ToString(),
              HasSubstr("'optim.state.fc2.weight.exp_avg', optimizer state of a parameter this model does not have"));
  EXPECT_EQ(extra_param.status().code(), absl::StatusCode::kFailedPrecondition);

  extra = TorchSave();
  extra.push_back({"optim.state.fc.weight.max_exp_avg_sq", "Float", {3, 4}});  // amsgrad
  EXPECT_THAT(PlanTorchLoad(extra, {}, LmRun()).status().ToString(),
              HasSubstr("state 'max_exp_avg_sq' of parameter 'fc.weight', which this run's optimizer does not keep"));

  extra = TorchSave();
  extra.push_back({"model.fc2.weight", "Float", {3, 4}});
  EXPECT_THAT(PlanTorchLoad(extra, {}, LmRun()).status().ToString(), HasSubstr("holds 'model.fc2.weight'"));
  // A value under optim.state. counts as state too.
  EXPECT_THAT(PlanTorchLoad(TorchSave(), {"optim.state.fc3.bias.step"}, LmRun()).status().ToString(),
              HasSubstr("'optim.state.fc3.bias.step'"));

  std::vector<NamedTensor> shape = TorchSave();
  shape[6].sizes = {4};  // optim.state.fc.bias.exp_avg
  EXPECT_THAT(PlanTorchLoad(shape, {}, LmRun()).status().ToString(),
              HasSubstr("'optim.state.fc.bias.exp_avg' has sizes [4], exp_avg of parameter 'fc.bias' has [3]"));
  std::vector<NamedTensor> dtype = TorchSave();
  dtype[0].dtype = "Double";
  EXPECT_THAT(PlanTorchLoad(dtype, {}, LmRun()).status().ToString(),
              HasSubstr("'model.fc.weight' is Double, the model's 'fc.weight' is Float"));
  std::vector<NamedTensor> step = TorchSave();
  step[5].sizes = {1};
  EXPECT_THAT(PlanTorchLoad(step, {}, LmRun()).status().ToString(), HasSubstr("a step count is a 0-dim tensor"));
}

TEST(TorchNamesTest, OneStepCountForEveryParameter) {
  EXPECT_EQ(*OneStep({{"a.step", 4}, {"b.step", 4}}), 4);
  EXPECT_EQ(*OneStep({}), 0);
  auto unequal = OneStep({{"optim.state.a.step", 4}, {"optim.state.b.step", 3}});
  EXPECT_THAT(unequal.status().ToString(), HasSubstr("'optim.state.b.step' is 3 and 'optim.state.a.step' is 4"));
  EXPECT_THAT(OneStep({{"a.step", 2.5}}).status().ToString(), HasSubstr("'a.step' is 2.5, not a step count"));
  EXPECT_FALSE(OneStep({{"a.step", -1}}).ok());
}

ParamGroupFields Decayed(double weight_decay) {
  return {{"lr", PlainValue::Float(1e-3)},
          {"betas", PlainValue::Tuple({PlainValue::Float(0.9), PlainValue::Float(0.95)})},
          {"weight_decay", PlainValue::Float(weight_decay)},
          {"amsgrad", PlainValue::Bool(false)},
          {"foreach", PlainValue::None()}};
}
ParamGroupFields FieldsOf(const std::string& p) { return Decayed(p == "fc.weight" ? 0.1 : 0.0); }

TEST(TorchNamesTest, ParamGroupsGroupEqualSettingsInOrder) {
  const std::vector<TorchParamGroup> groups = GroupParams({"fc.weight", "fc.bias", "fc2.weight"}, [](const std::string& p) {
    return Decayed(p == "fc.bias" ? 0.0 : 0.1);
  });
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0].params, ElementsAre("fc.weight", "fc2.weight"));
  EXPECT_THAT(groups[1].params, ElementsAre("fc.bias"));
  const ParamGroupFields flat = FlattenParamGroups(groups);
  ASSERT_EQ(flat.size(), 12u);
  EXPECT_EQ(flat[0].first, "optim.param_groups.0.lr");
  EXPECT_EQ(flat[5].first, "optim.param_groups.0.params");
  EXPECT_EQ(flat[5].second.Repr(), "['fc.weight', 'fc2.weight']");
  EXPECT_EQ(flat[8].first, "optim.param_groups.1.weight_decay");
  EXPECT_EQ(flat[8].second.Repr(), "0.0");
}

TEST(TorchNamesTest, ParamGroupsComparedWithTheRunsSettings) {
  const std::vector<std::string> params = {"fc.weight", "fc.bias"};
  ParamGroupFields saved = FlattenParamGroups(GroupParams(params, FieldsOf));
  // How torch computes is not compared (the run writes None, a torch user False), nor fields the run lacks.
  saved[4].second = PlainValue::Bool(false);  // group 0's foreach
  saved.emplace_back("optim.param_groups.0.capturable", PlainValue::Bool(true));
  auto same = CompareParamGroups(saved, params, FieldsOf);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(*same, ElementsAre());

  ParamGroupFields other = saved;
  other[0].second = PlainValue::Float(2e-3);  // group 0's lr
  other[2].second = PlainValue::Int(0);       // group 0's weight_decay 0 (an int): differs from 0.1
  other[8].second = PlainValue::Int(0);       // group 1's weight_decay 0: equals 0.0
  other[3].second = PlainValue::Bool(true);   // group 0's amsgrad: another update rule
  auto differ = CompareParamGroups(other, params, FieldsOf);
  ASSERT_TRUE(differ.ok()) << differ.status();
  EXPECT_THAT(*differ, ElementsAre("optim.param_groups.0.lr is 0.002, this run's lr is 0.001 (parameter 'fc.weight')",
                                   "optim.param_groups.0.weight_decay is 0, this run's weight_decay is 0.1 "
                                   "(parameter 'fc.weight')",
                                   "optim.param_groups.0.amsgrad is True, this run's amsgrad is False (parameter 'fc.weight')"));

  // The flattened form: one group per parameter.
  ParamGroupFields flat_form = {{"optim.param_groups.fc.weight.lr", PlainValue::Float(1e-3)},
                                {"optim.param_groups.fc.bias.lr", PlainValue::Float(5e-4)}};
  auto flat = CompareParamGroups(flat_form, params, FieldsOf);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_THAT(*flat, ElementsAre("optim.param_groups.fc.bias.lr is 0.0005, this run's lr is 0.001 (parameter 'fc.bias')"));
}

TEST(TorchNamesTest, ParamGroupsOfAnotherModelNameTheParameter) {
  const std::vector<std::string> params = {"fc.weight", "fc.bias"};
  auto unknown = CompareParamGroups(FlattenParamGroups(GroupParams({"fc.weight", "fc.bias", "fc2.bias"}, FieldsOf)),
                                    params, FieldsOf);
  EXPECT_THAT(unknown.status().ToString(), HasSubstr("names 'fc2.bias', a parameter this model does not have"));
  auto missing = CompareParamGroups(FlattenParamGroups(GroupParams({"fc.weight"}, FieldsOf)), params, FieldsOf);
  EXPECT_THAT(missing.status().ToString(), HasSubstr("do not name parameter 'fc.bias'"));
  ParamGroupFields twice = FlattenParamGroups(GroupParams(params, FieldsOf));
  twice.emplace_back("optim.param_groups.2.params", PlainValue::List({PlainValue::Str("fc.bias")}));
  EXPECT_THAT(CompareParamGroups(twice, params, FieldsOf).status().ToString(),
              HasSubstr("param_groups '1' and '2' both name parameter 'fc.bias'"));
  ParamGroupFields not_names = {{"optim.param_groups.0.params", PlainValue::List({PlainValue::Int(0)})}};
  EXPECT_THAT(CompareParamGroups(not_names, params, FieldsOf).status().ToString(),
              HasSubstr("'optim.param_groups.0.params' is [0], not a list of parameter names"));
}

}  // namespace
}  // namespace shardlight::lightning
