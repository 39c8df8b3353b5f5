#include "tools/bench/dcp_compare_table.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace shardlight::tools::bench {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(DcpCompareTable, BestOfRunsRatiosAndTargets) {
  const std::string tsv = Write("r.tsv",
                                "workload\tsystem\tmetric\tseconds\n"
                                "size:0.5\tdcp\tsave\t3.0\n"
                                "size:0.5\tdcp\tsave\t2.0\n"  // the best of two runs
                                "size:0.5\tshardlight\tsave\t1.25\n"
                                "size:0.5\tplain\twrite_fsync\t1.0\n"
                                "size:0.5\tdcp\tasync_block\t0.5\n"
                                "size:0.5\tshardlight\tasync_block\t0.1\n"
                                "size:0.5\tplain\tcopy_resident\t0.05\n"
                                "count:100000\tdcp\tload_warm\t50\n"
                                "count:100000\tshardlight\tload_warm\t10\n");
  const std::string bytes = Write("b.txt", "bytes size:0.5 536870912\nbytes count:100000 262144000\n");
  auto r = BuildDcpCompareReport({tsv, bytes, 2, 4});
  ASSERT_TRUE(r.ok()) << r.status();
  // save: 2.0 / 1.25 = 1.6x DCP (the target is 2x at 0.5 GiB), 1.0 / 1.25 = 0.8x write+fsync.
  EXPECT_NE(r->markdown.find("| size:0.5 | 512.0 | save (fsync) | 2.000 | 1.250 | 1.60 | write+fsync | 1.000 | 0.80 | "
                             ">= 2x DCP: MISSED; >= 0.9x write+fsync: MISSED |"),
            std::string::npos)
      << r->markdown;
  // async: 0.1 <= DCP's 0.5 but above 1.2 x one copy (0.06).
  EXPECT_NE(r->markdown.find("<= DCP: met; <= 1.2x one copy: MISSED"), std::string::npos) << r->markdown;
  // 100k tensors: 5x DCP against a target of 10x; 100 us per tensor.
  EXPECT_NE(r->markdown.find("| 5.00 | pread+CRC32C | - | - | >= 10x DCP: MISSED |"), std::string::npos) << r->markdown;
  EXPECT_NE(r->text.find("count:100000  per tensor: save - us (DCP - us), load 100.0 us (DCP 500.0 us)"),
            std::string::npos)
      << r->text;
  EXPECT_NE(r->markdown.find("thread_count 2"), std::string::npos);
  EXPECT_NE(r->markdown.find("job of 4 processes"), std::string::npos);
  EXPECT_NE(r->size_svg.find("<svg"), std::string::npos);
  EXPECT_NE(r->count_svg.find("shardlight load"), std::string::npos);
}

TEST(DcpCompareTable, MetTargets) {
  const std::string tsv = Write("m.tsv",
                                "workload\tsystem\tmetric\tseconds\n"
                                "size:2\tdcp\treshard_load\t4\n"
                                "size:2\tshardlight\treshard_load\t1\n"
                                "size:2\tdcp\tload_warm\t4\n"
                                "size:2\tshardlight\tload_warm\t1\n"
                                "size:2\tplain\tread_crc_warm\t0.96\n");
  auto r = BuildDcpCompareReport({tsv, "", 1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->markdown.find(">= 2x DCP: met; >= 0.95x verified read: met"), std::string::npos) << r->markdown;
  EXPECT_NE(r->markdown.find("resharding load | 4.000 | 1.000 | 4.00 |"), std::string::npos) << r->markdown;
}

TEST(DcpCompareTable, BadInputNamesTheLine) {
  auto r = BuildDcpCompareReport({Write("bad.tsv", "workload\tsystem\tmetric\tseconds\nsize:1\tdcp\tsave\n"), "", 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 2"), std::string::npos) << r.status();
  EXPECT_FALSE(BuildDcpCompareReport({"/nonexistent/r.tsv", "", 1}).ok());
  EXPECT_FALSE(BuildDcpCompareReport({Write("empty.tsv", "workload\tsystem\tmetric\tseconds\n"), "", 1}).ok());
  auto b = BuildDcpCompareReport(
      {Write("ok.tsv", "workload\tsystem\tmetric\tseconds\nsize:1\tdcp\tsave\t1\n"), Write("bb.txt", "bytes x\n"), 1});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("bad line 'bytes x'"), std::string::npos) << b.status();
}

}  // namespace
}  // namespace shardlight::tools::bench
