"""Real torchtitan (PyPI's torchtitan, pinned in tools/setup_torch2.sh) on both
ends of `ckpt`: its own CheckpointManager (torchtitan.components.checkpoint)
saves and loads, with its own OptimizersContainer, LRSchedulersContainer
(warm-up + linear decay) and ParallelAwareDataloader (a StatefulDataLoader),
and a train_state like its Trainer's ({"step", "ntokens_seen"}). A tiny MLP,
FSDP2 (fully_shard) over 2 ranks, Gloo on CPU.

  save WORK            under torchrun, 2 processes: trains STEPS_BEFORE
                       steps, CheckpointManager saves every SAVE_EVERY of
                       them into WORK/run/checkpoint/step-N; then trains
                       STEPS_AFTER more. Rank 0 writes WORK/values.txt
                       ("key = repr" per non-tensor entry, in .metadata's
                       order, with the values every rank saved),
                       WORK/tensors.txt (the tensor keys in .metadata's
                       order) and WORK/expect.pt (the full parameters after
                       the STEPS_AFTER steps, the step, tokens seen and
                       learning rate at the save).
  compare ORIG OTHER   one process, no process group: dcp.load of both DCP
                       directories; the same keys, every tensor bit-equal
                       (dtype, shape, bytes), every value equal (type too).
  resume WORK DIR      under torchrun, 2 processes: fresh components (other
                       seed), DIR moved in as step-N of a new checkpoint
                       folder, CheckpointManager.load(); the step, tokens
                       seen, learning rate and data position are the saved
                       ones, and STEPS_AFTER steps later the parameters are
                       bit-equal to the uninterrupted run's.
"""
import math
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset

STEPS_BEFORE, STEPS_AFTER, SAVE_EVERY = 4, 3, 2


class Samples(IterableDataset):
    """Endless deterministic samples for one data-parallel rank; its position
    is its state (as torchtitan's HuggingFaceTextDataset keeps one)."""

    def __init__(self, dp_rank, dp_world_size):
        self.dp_rank, self.dp_world_size, self.index = dp_rank, dp_world_size, 0

    def __iter__(self):
        while True:
            i = self.index * self.dp_world_size + self.dp_rank
            self.index += 1
            yield torch.randn(4, generator=torch.Generator().manual_seed(5000 + i))

    def state_dict(self):
        return {"sample_index": self.index}

    def load_state_dict(self, state):
        self.index = state["sample_index"]


class TrainState(Stateful):
    """What torchtitan's Trainer checkpoints as "train_state"."""

    def __init__(self):
        self.step, self.ntokens_seen = 0, 0

    def state_dict(self):
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state):
        self.step, self.ntokens_seen = state["step"], state["ntokens_seen"]


def components(seed, folder):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.dataloader import ParallelAwareDataloader
    from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
    from torchtitan.components.optimizer.optimizer import ParamGroupConfig
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))
    fully_shard(model, mesh=mesh)
    optimizers = OptimizersContainer(
        OptimizersContainer.Config(implementation="for-loop", param_groups=[ParamGroupConfig(
            pattern=".*", optimizer_name="AdamW",
            optimizer_kwargs={"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1})]),
        model_parts=[model])
    lr_schedulers = LRSchedulersContainer.Config(warmup_steps=2, decay_type="linear", min_lr_factor=0.1).build(
        optimizers=optimizers, training_steps=10)
    loader = ParallelAwareDataloader(Samples(rank, world), dp_rank=rank, dp_world_size=world, batch_size=2)
    train_state = TrainState()
    checkpointer = CheckpointManager(
        CheckpointManager.Config(enable=True, folder="checkpoint", interval=SAVE_EVERY, keep_latest_k=0),
        dataloader=loader, model_parts=[model], optimizers=optimizers, lr_schedulers=lr_schedulers,
        states={"train_state": train_state}, sd_adapter=None, base_folder=folder)
    return model, optimizers, lr_schedulers, loader, train_state, checkpointer


def train(model, optimizers, lr_schedulers, batches, train_state, steps, checkpointer=None):
    """The shape of torchtitan's Trainer loop: step, tokens, save."""
    for _ in range(steps):
        train_state.step += 1
        x = next(batches)
        train_state.ntokens_seen += x.numel()
        model(x).pow(2).mean().backward()
        optimizers.step()
        lr_schedulers.step()
        optimizers.zero_grad()
        if checkpointer is not None:
            checkpointer.save(train_state.step)


def full_params(model):
    return {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}


def lr_of(optimizers):
    return [g["lr"] for opt in optimizers for g in opt.param_groups]


def flat_values(sd, prefix=""):
    """The non-tensor leaves of a state dict as DCP flattens it (dotted keys)."""
    out = {}
    for k, v in sd.items():
        key = prefix + str(k)
        if isinstance(v, Stateful):  # as dcp.save calls it
            v = v.state_dict()
        if isinstance(v, dict):
            out.update(flat_values(v, key + "."))
        elif not isinstance(v, torch.Tensor):
            out[key] = v
    return out


def save(work):
    dist.init_process_group("gloo")
    model, optimizers, lr_schedulers, loader, train_state, checkpointer = components(20261205, os.path.join(work, "run"))
    batches = iter(loader)
    train(model, optimizers, lr_schedulers, batches, train_state, STEPS_BEFORE, checkpointer)
    ckpt_dir = os.path.join(work, "run", "checkpoint", "step-%d" % STEPS_BEFORE)
    # What each rank handed dcp.save, as CheckpointManager flattened it.
    mine = flat_values(checkpointer._flattened_model_states_sd())
    saved = [None] * dist.get_world_size()
    dist.all_gather_object(saved, mine)
    at_save = {"step": train_state.step, "ntokens_seen": train_state.ntokens_seen, "lr": lr_of(optimizers)}
    train(model, optimizers, lr_schedulers, batches, train_state, STEPS_AFTER)
    params = full_params(model)
    if dist.get_rank() == 0:
        values = {}
        for rank_values in saved:
            values.update(rank_values)
        md = dcp.FileSystemReader(ckpt_dir).read_metadata()
        with open(os.path.join(work, "values.txt"), "w", encoding="utf-8") as f:
            for key, m in md.state_dict_metadata.items():
                if isinstance(m, BytesStorageMetadata):
                    f.write("%s = %r\n" % (key, values[key]))
        with open(os.path.join(work, "tensors.txt"), "w", encoding="utf-8") as f:
            for key, m in md.state_dict_metadata.items():
                if not isinstance(m, BytesStorageMetadata):
                    f.write(key + "\n")
        torch.save(dict(at_save, params=params), os.path.join(work, "expect.pt"))
        print("torchtitan saved %s at step %d, lr %r" % (ckpt_dir, at_save["step"], at_save["lr"]))
    checkpointer.close()


def same_value(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    return a == b


def load_all(directory):
    md = dcp.FileSystemReader(directory).read_metadata()
    sd = {}
    for key, m in md.state_dict_metadata.items():
        sd[key] = None if isinstance(m, BytesStorageMetadata) else torch.empty(m.size, dtype=m.properties.dtype)
    dcp.load(sd, checkpoint_id=directory)
    return sd


def compare(orig, other):
    a, b = load_all(orig), load_all(other)
    assert sorted(a) == sorted(b), ("keys differ", sorted(set(a) ^ set(b)))
    tensors = 0
    for key, v in a.items():
        w = b[key]
        if isinstance(v, torch.Tensor):
            assert isinstance(w, torch.Tensor) and v.dtype == w.dtype and v.shape == w.shape, (key, w)
            assert torch.equal(v.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)), ("bytes", key)
            tensors += 1
        else:
            assert same_value(v, w), ("value differs", key, v, w)
    print("compare: %d tensors bit-equal, %d values equal" % (tensors, len(a) - tensors))


def resume(work, directory):
    dist.init_process_group("gloo")
    expect = torch.load(os.path.join(work, "expect.pt"), weights_only=True)
    folder = os.path.join(work, "resume")
    if dist.get_rank() == 0:
        os.makedirs(os.path.join(folder, "checkpoint"))
        shutil.copytree(directory, os.path.join(folder, "checkpoint", "step-%d" % STEPS_BEFORE))
    dist.barrier()
    model, optimizers, lr_schedulers, loader, train_state, checkpointer = components(7, folder)
    assert checkpointer.load(), "CheckpointManager.load found no checkpoint"
    assert train_state.step == expect["step"], ("step", train_state.step, expect["step"])
    assert train_state.ntokens_seen == expect["ntokens_seen"], ("ntokens_seen", train_state.ntokens_seen)
    assert lr_of(optimizers) == expect["lr"], ("learning rate", lr_of(optimizers), expect["lr"])
    group = optimizers.optimizers[0].param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["weight_decay"] == 0.1, group
    train(model, optimizers, lr_schedulers, iter(loader), train_state, STEPS_AFTER)
    for k, v in full_params(model).items():
        assert torch.equal(v, expect["params"][k]), ("the resumed run differs at", k)
    if dist.get_rank() == 0:
        print("torchtitan resumed at step %d, lr %r; %d steps later bit-equal to the uninterrupted run" %
              (expect["step"], expect["lr"], STEPS_AFTER))
    checkpointer.close()


def main():
    mode = sys.argv[1]
    {"save": save, "compare": compare, "resume": resume}[mode](*sys.argv[2:])
    if dist.is_initialized():
        dist.barrier()  # no rank leaves while another still writes
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
