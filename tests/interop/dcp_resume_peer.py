"""Real PyTorch on both ends of `ckpt` for DCP round trips.

  save DIR WORK       one process: trains a small MLP with AdamW + StepLR for
                      5 steps and dcp.save's {model, optim, lr_scheduler,
                      step} (get_state_dict's keys) into DIR; then trains 3
                      more steps and writes WORK/expect.pt (the parameters
                      after them, the learning rate and step at the save)
                      and WORK/net.pt (torch.save of the saved model weights
                      under "net.").
  resume DIR WORK     one process: a fresh model, optimizer and scheduler
                      (other seed and lr) dcp.load DIR into plain tensors and
                      values, resume, and must have the saved learning rate,
                      step and schedule, and after 3 steps parameters
                      bit-equal to the uninterrupted run's.
  plain DIR WORK      one process: dcp.load DIR (model weights at the top
                      level) into plain tensors; each bit-equal to
                      WORK/net.pt's.
  fsdp_tp DIR WORK    under torchrun, 4 processes (Gloo, CPU): the MLP
                      parallelize_module'd (Colwise, Rowwise) over a 2-D
                      DeviceMesh's "tp" dim and fully_shard'ed over its "dp"
                      dim; dcp.load DIR (model weights at the top level) into
                      its DTensor state dict; every full tensor bit-equal to
                      WORK/net.pt's.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

STEPS_BEFORE, STEPS_AFTER = 5, 3


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 6))


def parts(seed, lr):
    torch.manual_seed(seed)
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def train(model, opt, sched, steps, first):
    for i in range(first, first + steps):
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(5, 4, generator=g)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()


def one_process_group(work):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "pg.%d" % os.getpid()), rank=0,
                            world_size=1)


def state_of(model, opt, sched, step):
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd, "lr_scheduler": sched.state_dict(), "step": step}


def save(directory, work):
    one_process_group(work)
    model, opt, sched = parts(20261205, 1e-3)
    train(model, opt, sched, STEPS_BEFORE, 0)
    dcp.save(state_of(model, opt, sched, STEPS_BEFORE), checkpoint_id=directory)
    torch.save({"net." + k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(work, "net.pt"))
    lr = opt.param_groups[0]["lr"]
    train(model, opt, sched, STEPS_AFTER, STEPS_BEFORE)
    torch.save({"params": {k: v.detach().clone() for k, v in model.state_dict().items()}, "lr": lr,
                "step": STEPS_BEFORE}, os.path.join(work, "expect.pt"))
    print("saved at step %d, lr %r" % (STEPS_BEFORE, lr))


def resume(directory, work):
    one_process_group(work)
    expect = torch.load(os.path.join(work, "expect.pt"), weights_only=True)
    model, opt, sched = parts(7, 0.5)
    state = state_of(model, opt, sched, 0)
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    sched.load_state_dict(state["lr_scheduler"])
    step = state["step"]
    lr = opt.param_groups[0]["lr"]
    assert step == expect["step"], ("step", step, expect["step"])
    assert lr == expect["lr"], ("learning rate", lr, expect["lr"])
    assert opt.param_groups[0]["betas"] == (0.9, 0.95) and opt.param_groups[0]["weight_decay"] == 0.1, \
        opt.param_groups[0]
    assert sched.last_epoch == STEPS_BEFORE and sched.get_last_lr() == [lr], (sched.last_epoch, sched.get_last_lr())
    train(model, opt, sched, STEPS_AFTER, step)
    for k, v in model.state_dict().items():
        assert torch.equal(v, expect["params"][k]), ("resumed run differs at", k)
    print("resumed at step %d, lr %r; %d steps later bit-equal to the uninterrupted run" % (step, lr, STEPS_AFTER))


def plain(directory, work):
    ref = torch.load(os.path.join(work, "net.pt"), weights_only=True)
    sd = {k[len("net."):]: torch.zeros_like(v) for k, v in ref.items()}
    dcp.load(sd, checkpoint_id=directory)
    for k, v in sd.items():
        assert torch.equal(v, ref["net." + k]), ("differs", k)
    print("plain: %d tensors loaded bit-equal" % len(sd))


def fsdp_tp(directory, work):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    dist.init_process_group("gloo")
    assert dist.get_world_size() == 4, dist.get_world_size()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(3)
    model = mlp()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    msd, _ = get_state_dict(model, [])
    assert all(isinstance(v, DTensor) for v in msd.values()), {k: type(v) for k, v in msd.items()}
    dcp.load(msd, checkpoint_id=directory)
    ref = torch.load(os.path.join(work, "net.pt"), weights_only=True)
    assert sorted(msd) == sorted(k[len("net."):] for k in ref), (sorted(msd), sorted(ref))
    for k, v in msd.items():
        full = v.full_tensor()
        assert torch.equal(full, ref["net." + k]), ("differs", k)
    if dist.get_rank() == 0:
        print("fsdp_tp: %d DTensors (FSDP2 x TP, 2x2 mesh) loaded bit-equal: %s" %
              (len(msd), ", ".join("%s %s" % (k, v.placements) for k, v in msd.items())))
    dist.destroy_process_group()


def main():
    mode, directory, work = sys.argv[1:4]
    {"save": save, "resume": resume, "plain": plain, "fsdp_tp": fsdp_tp}[mode](directory, work)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
