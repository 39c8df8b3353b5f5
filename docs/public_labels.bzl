"""The public labels a consumer depends on: README.md's table lists exactly these
(docs:public_labels_test checks it), and the pages' C++ blocks compile against
them and nothing else, as code in another workspace would."""

PUBLIC_LABELS = [
    "//lightning:deferred_init",
    "//lightning:lightning_module",
    "//lightning:trainer",
    "//lightning/cluster:distributed",
    "//lightning/data:distributed_sampler",
    "//lightning/loggers",
    "//lightning/metrics",
    "//lightning/metrics:metrics_callback",
    "//lightning/strategies:ddp",
    "//lightning/strategies:fsdp",
    "//lightning/strategies:fsdp_tp",
    "//lightning/strategies:model_parallel",
    "//lightning/strategies:strategy",
    "//lightning/tp",
    "//sharded:sharded_tensor",
    "//sharded:state_dict",
    "//sharded/checkpoint",
    "//sharded/checkpoint/async:async_checkpointer",
    "//sharded/checkpoint/roots:checkpoint_root",
    "//sharded/checkpoint/storage/s3:s3_storage",
    "//sharded/checkpoint/interop/dcp",
    "//sharded/checkpoint/interop/dcp:dcp_writer",
    "//sharded/checkpoint/interop/pytorch",
    "//sharded/mesh:device_mesh",
    "//sharded/mesh:mesh_tensor",
    "//simulate/core:simulated_cluster",
]
