# Each round's ratio DCP / shardlight per workload and metric, from
# dcp_compare.tsv (workload, system, metric, seconds; rounds in file order).
BEGIN { FS = "\t" }
NR > 1 && ($2 == "dcp" || $2 == "shardlight") {
  key = $1 " " $3
  i = ++count[$2, key]
  secs[$2, key, i] = $4
  if (!(key in seen)) { seen[key] = 1; order[++keys] = key }
}
END {
  for (k = 1; k <= keys; ++k) {
    key = order[k]
    line = ""
    for (i = 1; i <= count["dcp", key] && i <= count["shardlight", key]; ++i) {
      ours = secs["shardlight", key, i]
      line = line sprintf("%s%.2fx", line == "" ? "" : ", ", ours > 0 ? secs["dcp", key, i] / ours : 0)
    }
    if (line != "") printf "dcp_compare: %s, DCP / shardlight by round: %s\n", key, line
  }
}
