"""Damages a copy of a DCP directory real torch wrote, the way a hostile or
broken checkpoint would be, by editing its Metadata with real torch's own
classes and pickling it again (or its bytes, for the file-level cases):
  dcp_damage.py CASE DIR"""
import os
import pickle
import sys

import torch
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex


def load(d):
    with open(os.path.join(d, ".metadata"), "rb") as f:
        return pickle.load(f)


def store(d, md):
    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def chunk_keys(md, fqn):
    return [k for k in md.storage_data if k.fqn == fqn]


class _Storage:
    """Pickled as torch.save's persistent storage id (see StridedPayload)."""

    def __init__(self, numel):
        self.numel = numel


class _StridedTensor:
    """Pickles as torch.save's _rebuild_tensor_v2 of a float32 storage with
    the given offset, sizes and strides, whatever they are."""

    def __init__(self, numel, offset, sizes, strides):
        self.args = (_Storage(numel), offset, tuple(sizes), tuple(strides))

    def __reduce__(self):
        import collections
        return (torch._utils._rebuild_tensor_v2, self.args + (False, collections.OrderedDict()))


class _PayloadPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, "0", "cpu", obj.numel)
        return None


def replace_payload(d, md, fqn, index, offset, sizes, strides):
    """Appends to the chunk's .distcp file a torch.save archive whose tensor
    has the given layout over a storage of the chunk's elements, and points
    the chunk's storage_data at it."""
    import io
    import zipfile
    k = chunk_keys(md, fqn)[index]
    chunk = [c for c in md.state_dict_metadata[fqn].chunks if list(c.offsets) == list(k.offset)][0]
    numel = 1
    for n in chunk.sizes:
        numel *= n
    pkl = io.BytesIO()
    _PayloadPickler(pkl, protocol=2).dump(_StridedTensor(numel, offset, sizes, strides))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl.getvalue())
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", bytes(4 * numel))
        z.writestr("archive/version", "3\n")
    info = md.storage_data[k]
    path = os.path.join(d, info.relative_path)
    info.offset = os.path.getsize(path)
    info.length = len(archive.getvalue())
    with open(path, "ab") as f:
        f.write(archive.getvalue())


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/dcp_damage_pwned",))


def main():
    case, d = sys.argv[1:3]
    md = load(d)
    emb = md.state_dict_metadata["emb.weight"]
    if case == "overlap":  # chunk 1 starts inside chunk 0
        c = emb.chunks[1]
        emb.chunks[1] = ChunkStorageMetadata(offsets=torch.Size([c.offsets[0] - 1, 0]), sizes=c.sizes)
        info = md.storage_data.pop(chunk_keys(md, "emb.weight")[1])
        md.storage_data[MetadataIndex("emb.weight", emb.chunks[1].offsets)] = info
    elif case == "hole":  # the last chunk gone: rows 30..36 covered by nothing
        last = emb.chunks.pop()
        md.storage_data.pop(MetadataIndex("emb.weight", last.offsets))
    elif case == "exceeds":  # a chunk past the tensor's rows
        emb.size = torch.Size([36, 8])
    elif case == "huge":  # sizes no memory holds
        emb.size = torch.Size([2**62, 2**62])
    elif case == "past_end":  # a payload beyond its file's end
        k = chunk_keys(md, "emb.weight")[2]
        md.storage_data[k].offset = 10**12
    elif case == "long":  # a payload's length past its file's end
        k = chunk_keys(md, "emb.weight")[2]
        md.storage_data[k].length = 10**9
    elif case == "class":  # a class outside DCP's metadata: must never run
        md.planner_data = {"x": Evil()}
    elif case == "deep":  # nesting far deeper than any metadata
        nested = []
        for _ in range(5000):
            nested = [nested]
        md.planner_data = {"x": nested}
    elif case == "cycle":  # a self-referencing value
        loop = []
        loop.append(loop)
        md.planner_data = {"x": loop}
    elif case == "missing":  # a data file gone
        os.remove(os.path.join(d, "__2_0.distcp"))
        return
    elif case == "truncated":  # a data file cut short
        p = os.path.join(d, "__1_0.distcp")
        os.truncate(p, os.path.getsize(p) // 2)
        return
    elif case == "metadata_truncated":
        p = os.path.join(d, ".metadata")
        os.truncate(p, os.path.getsize(p) // 3)
        return
    elif case == "transform":  # a payload stored through an extension
        k = chunk_keys(md, "emb.weight")[0]
        md.storage_data[k].transform_descriptors = ["stream_zstd"]
    # Hostile strides in chunk 0 of emb.weight (10 x 8 rows of float32).
    elif case == "stride_negative":
        replace_payload(d, md, "emb.weight", 0, 79, [10, 8], [8, -1])
    elif case == "stride_zero":  # an expanded view: every row the same 8 elements
        replace_payload(d, md, "emb.weight", 0, 0, [10, 8], [0, 1])
    elif case == "stride_overlap":  # rows that share elements
        replace_payload(d, md, "emb.weight", 0, 0, [10, 8], [4, 1])
    elif case == "stride_past_storage":  # a dense layout that starts too late
        replace_payload(d, md, "emb.weight", 0, 5, [10, 8], [8, 1])
    elif case == "stride_overflow":  # extents no int64 holds
        replace_payload(d, md, "emb.weight", 0, 0, [10, 8], [2**62, 2**61])
    else:
        raise SystemExit("unknown case " + case)
    store(d, md)


if __name__ == "__main__":
    sys.setrecursionlimit(20000)
    main()
