"""boto3 (AWS's Python SDK) reads a shardlight checkpoint from an S3 bucket
with nothing of shardlight's: it lists the objects under the prefix, reads
index.json, checks every data file it names is there with the size it says,
rebuilds every tensor from ranged GETs of its shards' byte ranges, and
compares each bit for bit with a reference torch.save file.
  s3_boto3_read.py BUCKET PREFIX REFERENCE.pt
(AWS_* variables say where the server is.)"""
import json
import sys

import boto3
import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def main():
    bucket, prefix, reference = sys.argv[1:4]
    s3 = boto3.client("s3")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
    sizes = {o["Key"][len(prefix) + 1:]: o["Size"] for o in listed.get("Contents", [])}
    assert "index.json" in sizes, sorted(sizes)
    index = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "/index.json")["Body"].read())
    for f in index["files"]:
        assert sizes.get(f["name"]) == f["bytes"], (f, sizes.get(f["name"]))
    ref = torch.load(reference, weights_only=True)
    got = {}
    for t in index["tensors"]:
        dtype = DTYPES[t["dtype"]]
        full = torch.empty(t["shape"], dtype=dtype)
        for shard in t["shards"]:
            begin, end = shard["byte_range"]
            if end == begin:
                continue
            body = s3.get_object(Bucket=bucket, Key=prefix + "/" + shard["file"],
                                 Range="bytes=%d-%d" % (begin, end - 1))["Body"].read()
            assert len(body) == end - begin, (t["key"], len(body), end - begin)
            part = torch.frombuffer(bytearray(body), dtype=dtype).reshape(shard["sizes"])
            region = full
            for dim, (off, size) in enumerate(zip(shard["offsets"], shard["sizes"])):
                region = region.narrow(dim, off, size)
            region.copy_(part)
        got[t["key"]] = full
    # The reference (a torch.save export) also holds the non-tensor values,
    # which the index carries as Python reprs under "values".
    values = {v["key"]: v["value"] for v in index.get("values", [])}
    assert sorted(values) == sorted(k for k in ref if not isinstance(ref[k], torch.Tensor)), (sorted(values), sorted(ref))
    ref = {k: v for k, v in ref.items() if isinstance(v, torch.Tensor)}
    assert sorted(got) == sorted(ref), (sorted(got), sorted(ref))
    bad = [k for k in ref if not (got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape and
                                  got[k].contiguous().view(-1).view(torch.uint8).equal(
                                      ref[k].contiguous().view(-1).view(torch.uint8)))]
    assert not bad, "differ: %s" % bad
    print("boto3 read %d tensors from %d objects under s3://%s/%s" % (len(got), len(sizes), bucket, prefix))


if __name__ == "__main__":
    main()
