// What a carried state records of the runs it took in (docs/FORMAT.md, "Committing a run"): the
// last run and the ones it recalls, as text that reads back to the same record, refused when it
// is not that text; and a checkpoint's copy of the record of the state its run began from.
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/dedup_checkpoint.hpp"
#include "cli/run_record.hpp"

namespace bulkbloom::cli {
namespace {

std::vector<std::byte> bytes(std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

std::string text(const std::vector<std::byte>& data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

RunRecord sample_record() {
  RunRecord record;
  record.command = "--format=u64";
  record.inputs = {{"day1.u64", {800, 0x1234}}, {"day2.u64", {1600, 0xabcd}}};
  record.outputs = {{"/data/out.u64", 720, 0x9999}};
  record.earlier = {{"--format=u64", 0x5555, 2400, {{"/data/o1.u64", 10, 0x1}}},
                    {"--format=dec", std::nullopt, 0, {{"/data/o2", 0, 0}, {"/data/d2", 3, 0x2}}}};
  return record;
}

void expect_same(const RunRecord& a, const RunRecord& b) {
  EXPECT_EQ(a.command, b.command);
  EXPECT_EQ(a.legacy, b.legacy);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].path, b.inputs[i].path);
    EXPECT_EQ(a.inputs[i].content.bytes, b.inputs[i].content.bytes);
    EXPECT_EQ(a.inputs[i].content.hash, b.inputs[i].content.hash);
  }
  const auto same_outputs = [](const std::vector<OutputRecord>& x,
                               const std::vector<OutputRecord>& y) {
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].path, y[i].path);
      EXPECT_EQ(x[i].size, y[i].size);
      EXPECT_EQ(x[i].sample_hash, y[i].sample_hash);
    }
  };
  same_outputs(a.outputs, b.outputs);
  ASSERT_EQ(a.earlier.size(), b.earlier.size());
  for (std::size_t i = 0; i < a.earlier.size(); ++i) {
    EXPECT_EQ(a.earlier[i].command, b.earlier[i].command);
    EXPECT_EQ(a.earlier[i].inputs_hash, b.earlier[i].inputs_hash);
    EXPECT_EQ(a.earlier[i].input_bytes, b.earlier[i].input_bytes);
    same_outputs(a.earlier[i].outputs, b.earlier[i].outputs);
  }
}

TEST(RunRecord, ReadsBackWhatItWrote) {
  const RunRecord record = sample_record();
  const auto encoded = encode_run_record(record);
  EXPECT_TRUE(text(encoded).starts_with("bulkbloom-run 3\ncommand=--format=u64\ninput=800 "));
  const auto decoded = decode_run_record(encoded);
  ASSERT_TRUE(decoded);
  expect_same(*decoded, record);
}

TEST(RunRecord, VersionTwoRecallsNothing) {
  const auto decoded =
      decode_run_record(bytes("bulkbloom-run 2\ncommand=--format=u64\ninput=8 00000000000000ff in\n"
                              "output=8 0000000000000001 /out\n"));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->inputs.size(), 1u);
  EXPECT_TRUE(decoded->earlier.empty());
  EXPECT_FALSE(decode_run_record(
      bytes("bulkbloom-run 2\ncommand=\nearlier=8 00000000000000ff\ncommand=\n")));
}

TEST(RunRecord, RefusesWhatIsNotARecord) {
  const std::string head = "bulkbloom-run 3\ncommand=--format=u64\n";
  for (const std::string bad : {
           std::string("bulkbloom-run 3\ninput=8 00000000000000ff in\n"),  // no command
           head + "command=--format=dec\n",                                // two commands
           head + "earlier=8 00000000000000ff\n",                          // block, no command
           head + "earlier=8 00000000000000ff\ncommand=\ncommand=\n",      // two in a block
           head + "earlier=8 00000000000000ff\ncommand=\ninput=8 0 in\n",  // an input in it
           head + "earlier=8 ff\ncommand=\n",                              // short hash
           head + "earlier= 00000000000000ff\ncommand=\n",                 // no size
           head + "earlier=8 00000000000000ffz\ncommand=\n",               // trailing text
           head + "earlier=-8 00000000000000ff\ncommand=\n",               // a sign
           head + "earlier= 8 00000000000000ff\ncommand=\n",               // a space
           head + "surprise=1\n",                                          // unknown key
           head + "output=1 0 /out",                                       // no last newline
       }) {
    EXPECT_FALSE(decode_run_record(bytes(bad))) << bad;
  }
  EXPECT_TRUE(decode_run_record(bytes(head + "earlier=-\ncommand=\n")));
}

TEST(RunRecord, APathThatCannotBeALineIsLeftOutNotTheRecord) {
  RunRecord record = sample_record();
  record.inputs[0].path = "day\n1.u64";
  record.outputs.push_back({"/data/odd\nname", 8, 0x3});
  const auto decoded = decode_run_record(encode_run_record(record));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->inputs[0].path, "day 1.u64");
  ASSERT_EQ(decoded->outputs.size(), 1u);
  EXPECT_EQ(decoded->outputs[0].path, "/data/out.u64");
  EXPECT_EQ(decoded->earlier.size(), 2u);
}

TEST(RunRecord, RecallsTheLastRunThenTheOnesItRecalledUpToTheCap) {
  EXPECT_TRUE(runs_before(std::nullopt).empty());
  RunRecord last = sample_record();
  std::vector<EarlierRun> runs = runs_before(last);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].command, last.command);
  EXPECT_EQ(runs[0].input_bytes, 2400u);
  const std::vector<InputContent> contents{{800, 0x1234}, {1600, 0xabcd}};
  EXPECT_EQ(runs[0].inputs_hash, inputs_hash(contents));
  EXPECT_NE(inputs_hash(contents),
            inputs_hash(std::vector<InputContent>{{1600, 0xabcd}, {800, 0x1234}}));
  EXPECT_EQ(runs[1].inputs_hash, last.earlier[0].inputs_hash);
  last.inputs.clear();  // stdin, or an output that is not a regular file
  EXPECT_FALSE(runs_before(last)[0].inputs_hash);
  last.earlier.assign(kRunsRecalled + 5, last.earlier[0]);
  runs = runs_before(last);
  EXPECT_EQ(runs.size(), kRunsRecalled - 1);
  last.legacy = true;  // a version 1 record: names and times, not contents
  EXPECT_TRUE(runs_before(last).empty());
}

DedupCheckpoint sample_checkpoint() {
  DedupCheckpoint checkpoint;
  checkpoint.run_identity = "args: dedup in";
  checkpoint.filter_before = "manifest 1";
  return checkpoint;
}

TEST(CheckpointFilterRun, ReadsBackTheRecordTheStateHadOrNone) {
  DedupCheckpoint checkpoint = sample_checkpoint();
  checkpoint.filter_run = encode_run_record(sample_record());
  DedupCheckpoint decoded = decode_checkpoint(encode_checkpoint(checkpoint), "ck");
  ASSERT_TRUE(decoded.filter_run);
  EXPECT_EQ(text(*decoded.filter_run), text(*checkpoint.filter_run));
  EXPECT_EQ(decoded.filter_before, checkpoint.filter_before);

  checkpoint.filter_run.emplace();  // the state had no record
  decoded = decode_checkpoint(encode_checkpoint(checkpoint), "ck");
  ASSERT_TRUE(decoded.filter_run);
  EXPECT_TRUE(decoded.filter_run->empty());

  checkpoint.filter_run.reset();  // as an older bulkbloom wrote it
  const std::string older = text(encode_checkpoint(checkpoint));
  EXPECT_EQ(older.find("filter_run"), std::string::npos);
  EXPECT_FALSE(decode_checkpoint(bytes(older), "ck").filter_run);
}

}  // namespace
}  // namespace bulkbloom::cli
