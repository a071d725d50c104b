#include "cadre/engine/controller.h"

#include <gtest/gtest.h>

namespace cadre::engine {
namespace {

Request Allreduce(const std::string& name, int64_t n) {
  Request r;
  r.name = name;
  r.shape = {n};
  return r;
}

// Runs one cycle on every controller with the given fresh requests per rank.
std::vector<std::vector<Response>> Cycle(std::vector<Controller>& cs,
                                         const std::vector<std::vector<Request>>& fresh,
                                         std::vector<bool> joined = {}) {
  std::vector<Message> msgs;
  for (size_t r = 0; r < cs.size(); ++r) {
    Message m = cs[r].MakeMessage(fresh[r], false, !joined.empty() && joined[r]);
    auto bytes = m.Encode();  // through the wire format, as the engine does
    msgs.push_back(Message::Decode(bytes.data(), bytes.size(), static_cast<int>(r)));
  }
  std::vector<std::vector<Response>> out;
  for (auto& c : cs) out.push_back(c.Process(msgs));
  return out;
}

std::vector<Controller> Make(int size, size_t fusion = 1 << 20) {
  std::vector<Controller> cs;
  for (int r = 0; r < size; ++r) cs.emplace_back(r, size, fusion, 16);
  return cs;
}

TEST(ControllerTest, ReadyOnlyWhenEveryRankSubmitted) {
  auto cs = Make(2);
  auto out = Cycle(cs, {{Allreduce("a", 4)}, {}});
  EXPECT_TRUE(out[0].empty());
  auto pending = cs[0].Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].missing_ranks, std::vector<int>{1});
  out = Cycle(cs, {{}, {Allreduce("a", 4)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].kind, Response::Kind::kRun);
    EXPECT_EQ(o[0].names, std::vector<std::string>{"a"});
  }
  EXPECT_TRUE(cs[1].Pending().empty());
}

TEST(ControllerTest, WaitingOnlyForOthersWhenThisRankSubmittedEveryPendingName) {
  auto cs = Make(2);
  Cycle(cs, {{Allreduce("a", 4)}, {}});
  EXPECT_TRUE(cs[0].waiting_only_for_others());   // rank 1 must submit 'a'
  EXPECT_FALSE(cs[1].waiting_only_for_others());  // rank 1 itself owes 'a'
  Cycle(cs, {{}, {Allreduce("a", 4)}});
  EXPECT_FALSE(cs[0].waiting_only_for_others());  // nothing pending
}

TEST(ControllerTest, AbortFromOneRankStopsEveryRankWithItsError) {
  auto cs = Make(3);
  std::vector<Message> msgs;
  for (int r = 0; r < 3; ++r) {
    const Status abort = r == 1 ? TimeoutError("stalled: 'x' missing from rank(s) 2") : Status();
    auto bytes = cs[r].MakeMessage({Allreduce("x", 1)}, false, false, abort).Encode();
    msgs.push_back(Message::Decode(bytes.data(), bytes.size(), r));
  }
  EXPECT_EQ(msgs[1].abort.code(), Code::kTimeout);
  for (auto& c : cs) {
    auto out = c.Process(msgs);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, Response::Kind::kShutdown);
    EXPECT_EQ(out[0].error.code(), Code::kTimeout);
    EXPECT_NE(out[0].error.message().find("stopped by rank 1"), std::string::npos);
    EXPECT_NE(out[0].error.message().find("missing from rank(s) 2"), std::string::npos);
  }
}

TEST(ControllerTest, InlineOnlyWhenEveryRankSentItsBytes) {
  auto cs = Make(2);
  const std::vector<uint8_t> one = {1, 0, 0, 0}, two = {2, 0, 0, 0};
  Request a = Allreduce("a", 1), b = Allreduce("b", 1);
  std::vector<Message> msgs;
  for (int r = 0; r < 2; ++r) {
    // Rank 1 leaves out its payload for "b" (as over the message budget).
    std::vector<std::vector<uint8_t>> payloads = {r == 0 ? one : two,
                                                  r == 0 ? one : std::vector<uint8_t>{}};
    auto bytes = cs[r].MakeMessage({a, b}, false, false, Status(), payloads).Encode();
    msgs.push_back(Message::Decode(bytes.data(), bytes.size(), r));
  }
  for (auto& c : cs) {
    auto out = c.Process(msgs);
    ASSERT_EQ(out.size(), 2u);  // the inline one is never fused
    EXPECT_EQ(out[0].names, std::vector<std::string>{"a"});
    EXPECT_EQ(out[0].inline_inputs, (std::vector<std::vector<uint8_t>>{one, two}));
    EXPECT_EQ(out[1].names, std::vector<std::string>{"b"});
    EXPECT_TRUE(out[1].inline_inputs.empty());
  }
}

TEST(ControllerTest, PayloadCountMustMatchRequests) {
  Controller c(0, 1, 1 << 20, 16);
  Message m;
  m.requests = {Allreduce("a", 1)};
  m.payloads = {{1, 2, 3, 4}, {5}};
  EXPECT_THROW(m.Encode(), Error);
  m.payloads.pop_back();
  auto bytes = m.Encode();
  bytes.resize(bytes.size() - 2);  // truncated payload
  EXPECT_THROW(Message::Decode(bytes.data(), bytes.size(), 0), Error);
}

TEST(ControllerTest, MalformedAbortIsAProtocolErrorNamingTheRank) {
  // Flags byte with the abort bit, then status code 99 (unknown).
  const std::vector<uint8_t> bytes = {4, 99, 0, 0, 0};
  try {
    Message::Decode(bytes.data(), bytes.size(), 3);
    FAIL() << "decoded a malformed message";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), Code::kProtocol);
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
}

void ExpectProtocolError(const std::vector<uint8_t>& bytes, int rank, const std::string& what) {
  try {
    Message::Decode(bytes.data(), bytes.size(), rank);
    ADD_FAILURE() << "decoded a malformed message (" << what << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), Code::kProtocol);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(rank)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ControllerTest, BatchWindowTravelsFromRankZeroToEveryRank) {
  using std::chrono::microseconds;
  auto cs = Make(3);
  std::vector<Message> msgs;
  for (int r = 0; r < 3; ++r) {
    Message m = cs[r].MakeMessage({Allreduce("a", 1)}, false, false);
    if (r == 0) m.batch_window = microseconds(250);
    auto bytes = m.Encode();
    msgs.push_back(Message::Decode(bytes.data(), bytes.size(), r));
  }
  EXPECT_EQ(msgs[0].batch_window, microseconds(250));
  EXPECT_FALSE(msgs[1].batch_window.has_value());
  for (auto& c : cs) {
    auto out = c.Process(msgs);
    EXPECT_EQ(out.size(), 1u);  // the window changes nothing else
    EXPECT_EQ(c.announced_batch_window(), microseconds(250));
  }
  // Announced once: a cycle without it leaves nothing announced (every rank keeps the last).
  Cycle(cs, {{}, {}, {}});
  for (auto& c : cs) EXPECT_FALSE(c.announced_batch_window().has_value());
  // Zero (no batching) is a window like any other.
  Message zero;
  zero.batch_window = microseconds(0);
  auto bytes = zero.Encode();
  EXPECT_EQ(Message::Decode(bytes.data(), bytes.size(), 0).batch_window, microseconds(0));
}

TEST(ControllerTest, BatchWindowFromAnotherRankOrTooLongOrUnknownFlagsIsAProtocolError) {
  auto cs = Make(2);
  std::vector<Message> msgs(2);
  msgs[1].batch_window = std::chrono::microseconds(100);
  try {
    cs[0].Process(msgs);
    ADD_FAILURE() << "accepted a window from rank 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), Code::kProtocol);
    EXPECT_NE(std::string(e.what()).find("rank 1 announced a batch window"), std::string::npos)
        << e.what();
  }
  // Flags byte with the window bit, then 2,000,000 us as a varint: longer than 1 s.
  ExpectProtocolError({16, 0x80, 0x89, 0x7a, 0, 0}, 1, "longer than 1 s");
  ExpectProtocolError({16}, 1, "");  // the window is missing
  // A flag this version does not know (a peer running another cadre version).
  ExpectProtocolError({64, 0, 0}, 2, "unknown flags 64");
  Message too_long;
  too_long.batch_window = std::chrono::seconds(2);
  EXPECT_THROW(too_long.Encode(), Error);
}

TEST(ControllerTest, MismatchFailsOnEveryRankWithEachRanksDescription) {
  auto cs = Make(3);
  auto out = Cycle(cs, {{Allreduce("w", 4)}, {Allreduce("w", 4)}, {Allreduce("w", 5)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].kind, Response::Kind::kError);
    EXPECT_EQ(o[0].error.code(), Code::kMismatch);
    const std::string& m = o[0].error.message();
    EXPECT_NE(m.find("rank 2: allreduce float32[5]"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0: allreduce float32[4]"), std::string::npos) << m;
  }
  // Still usable afterwards.
  out = Cycle(cs, {{Allreduce("w", 4)}, {Allreduce("w", 4)}, {Allreduce("w", 4)}});
  EXPECT_EQ(out[2][0].kind, Response::Kind::kRun);
}

Request Member(const std::string& group, uint32_t index, uint32_t group_size) {
  Request r = Allreduce(group + "." + std::to_string(index), group_size ? 4 : 0);
  r.grouped = true;
  r.group = group;
  r.group_index = index;
  r.group_size = group_size;
  return r;
}

// A group of 3 tensors on ranks 0 and 2 and of 2 on rank 1: rank 1 never submits 'g.2', which
// fails nonetheless, on every rank, as soon as ranks 0 and 2 have submitted it.
TEST(ControllerTest, GroupSizesThatDifferFailEveryMemberOnEveryRank) {
  auto cs = Make(3);
  std::vector<std::vector<Response>> out = Cycle(
      cs, {{Member("g", 0, 3), Member("g", 1, 3), Member("g", 2, 3)}, {}, {Member("g", 0, 3)}});
  for (auto& o : out) EXPECT_TRUE(o.empty());
  // Rank 1's members reveal the mismatch; rank 2's 'g.2' is still to come.
  out = Cycle(cs, {{}, {Member("g", 0, 2), Member("g", 1, 2)}, {Member("g", 1, 3)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(o[i].names, std::vector<std::string>{"g." + std::to_string(i)});
      EXPECT_EQ(o[i].kind, Response::Kind::kError);
      EXPECT_EQ(o[i].error.code(), Code::kMismatch);
      const std::string& m = o[i].error.message();
      EXPECT_NE(m.find("group 'g' of 3 tensors vs 'g' of 2"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1: allreduce float32[4] op=sum (tensor " + std::to_string(i) +
                       " of 2 in group 'g')"),
                std::string::npos)
          << m;
    }
  }
  EXPECT_EQ(cs[0].Pending().size(), 1u);
  EXPECT_EQ(cs[0].Pending()[0].missing_ranks, std::vector<int>{2});  // not rank 1
  out = Cycle(cs, {{}, {}, {Member("g", 2, 3)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].names, std::vector<std::string>{"g.2"});
    EXPECT_EQ(o[0].kind, Response::Kind::kError);
    const std::string& m = o[0].error.message();
    EXPECT_NE(m.find("tensor 'g.2' (only rank(s) 0, 2 submitted it)"), std::string::npos) << m;
    EXPECT_NE(m.find("of 3 tensors vs 'g' of 2"), std::string::npos) << m;
  }
  for (auto& c : cs) EXPECT_FALSE(c.has_pending());
  // The group is usable again once the ranks agree.
  out = Cycle(cs, {{Member("g", 0, 1)}, {Member("g", 0, 1)}, {Member("g", 0, 1)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].kind, Response::Kind::kRun);
  }
}

// The orphans are decided in the same cycle as the mismatch that reveals them.
TEST(ControllerTest, GroupOrphansSubmittedEarlierFailInTheMismatchsCycle) {
  auto cs = Make(2);
  Cycle(cs, {{Member("g", 0, 3), Member("g", 1, 3), Member("g", 2, 3)}, {}});
  auto out = Cycle(cs, {{}, {Member("g", 0, 1)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 3u);
    for (auto& resp : o) EXPECT_EQ(resp.kind, Response::Kind::kError);
    EXPECT_NE(o[2].error.message().find("'g.2' (only rank(s) 0 submitted it)"), std::string::npos)
        << o[2].error.message();
  }
  for (auto& c : cs) EXPECT_FALSE(c.has_pending());
}

// Rank 1 submits its last member a cycle late: the orphan fails once, and the group's next use,
// where the ranks agree, is not mistaken for it.
TEST(ControllerTest, GroupOrphanFailsOnceAndTheGroupsNextUseRuns) {
  auto cs = Make(2);
  Cycle(cs, {{Member("g", 0, 3), Member("g", 1, 3), Member("g", 2, 3)}, {}});
  auto out = Cycle(cs, {{}, {Member("g", 0, 2)}});
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].kind, Response::Kind::kError);
  out = Cycle(cs, {{}, {Member("g", 1, 2)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 2u);
    EXPECT_EQ(o[0].names, std::vector<std::string>{"g.1"});
    EXPECT_EQ(o[1].names, std::vector<std::string>{"g.2"});
    EXPECT_EQ(o[1].kind, Response::Kind::kError);
  }
  out = Cycle(cs, {{Member("g", 0, 3), Member("g", 1, 3), Member("g", 2, 3)}, {}});
  for (auto& o : out) EXPECT_TRUE(o.empty());
  out = Cycle(cs, {{}, {Member("g", 0, 3), Member("g", 1, 3), Member("g", 2, 3)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);  // fused
    EXPECT_EQ(o[0].kind, Response::Kind::kRun);
    EXPECT_EQ(o[0].names.size(), 3u);
  }
}

// A rank whose group is empty sends its marker (index 0 of 0): the others' members fail, the
// ones it has no counterpart of included; when every rank's group is empty the markers run.
TEST(ControllerTest, AnEmptyGroupOnOneRankFailsTheOthersMembers) {
  auto cs = Make(2);
  auto out = Cycle(cs, {{Member("g", 0, 2), Member("g", 1, 2)}, {Member("g", 0, 0)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 2u);
    EXPECT_EQ(o[0].kind, Response::Kind::kError);
    const std::string& m = o[0].error.message();
    EXPECT_NE(m.find("group 'g' of 2 tensors vs 'g' of 0"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1: allreduce float32[0] op=sum (marker of the empty group 'g')"),
              std::string::npos)
        << m;
    EXPECT_EQ(o[1].names, std::vector<std::string>{"g.1"});
    EXPECT_EQ(o[1].kind, Response::Kind::kError);
  }
  for (auto& c : cs) EXPECT_FALSE(c.has_pending());
  out = Cycle(cs, {{Member("g", 0, 0)}, {Member("g", 0, 0)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0].kind, Response::Kind::kRun);
  }
}

// In one pass an orphan of group 'a' is decided and group 'b' reveals one: 'b.1' still fails in
// that cycle (the passes go on while orphans are recorded, whatever their number).
TEST(ControllerTest, OrphansRevealedWhileOthersAreDecidedFailInTheSameCycle) {
  auto cs = Make(3);
  Cycle(cs, {{Member("a", 0, 2), Member("a", 1, 2), Member("b", 0, 2), Member("b", 1, 2)},
             {Member("a", 0, 1)},
             {Member("a", 0, 2), Member("b", 0, 2), Member("b", 1, 2)}});
  auto out = Cycle(cs, {{}, {Member("b", 0, 1)}, {Member("a", 1, 2)}});
  for (auto& o : out) {
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(o[0].names, std::vector<std::string>{"a.1"});
    EXPECT_EQ(o[1].names, std::vector<std::string>{"b.0"});
    EXPECT_EQ(o[2].names, std::vector<std::string>{"b.1"});
    for (auto& resp : o) EXPECT_EQ(resp.kind, Response::Kind::kError);
  }
  for (auto& c : cs) EXPECT_FALSE(c.has_pending());
}

TEST(ControllerTest, SecondTimeSendsCacheBitsOnly) {
  auto cs = Make(2);
  Cycle(cs, {{Allreduce("a", 4), Allreduce("b", 2)}, {Allreduce("a", 4), Allreduce("b", 2)}});
  Message m = cs[0].MakeMessage({Allreduce("b", 2), Allreduce("a", 4)}, false, false);
  EXPECT_TRUE(m.requests.empty());
  EXPECT_EQ(m.cache_bits.size(), 2u);
  // A changed request is sent in full (and then fails negotiation against the cached peer).
  m = cs[0].MakeMessage({Allreduce("a", 8)}, false, false);
  EXPECT_EQ(m.requests.size(), 1u);
  auto out = Cycle(cs, {{Allreduce("a", 8)}, {Allreduce("a", 4)}});
  EXPECT_EQ(out[0][0].kind, Response::Kind::kError);
}

TEST(ControllerTest, FusesConsecutiveSameTypeAllreducesUpToThreshold) {
  auto cs = Make(2, /*fusion=*/40);  // 10 floats
  std::vector<Request> reqs = {Allreduce("a", 4), Allreduce("b", 4), Allreduce("c", 4)};
  Request d = Allreduce("d", 1);
  d.dtype = comm::DataType::kFloat64;
  reqs.push_back(d);
  auto out = Cycle(cs, {reqs, reqs});
  ASSERT_EQ(out[0].size(), 3u);
  EXPECT_EQ(out[0][0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[0][1].names, (std::vector<std::string>{"c"}));
  EXPECT_EQ(out[0][2].names, (std::vector<std::string>{"d"}));
}

TEST(ControllerTest, JoinedRanksDoNotHoldBackAllreduceAndJoinCompletesWhenAllJoin) {
  auto cs = Make(2);
  auto out = Cycle(cs, {{Allreduce("g", 3)}, {}}, {false, true});
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0].kind, Response::Kind::kRun);
  EXPECT_FALSE(out[1][0].per_rank[0][1].has_value());
  Request b;
  b.op = OpType::kBroadcast;
  b.name = "p";
  b.shape = {1};
  out = Cycle(cs, {{b}, {}}, {false, true});
  EXPECT_EQ(out[0][0].kind, Response::Kind::kError);
  EXPECT_NE(out[0][0].error.message().find("rank(s) 1 joined"), std::string::npos);
  Request g;  // allgather too, as in Horovod (a joined rank has no rows to give)
  g.op = OpType::kAllgather;
  g.name = "rows";
  g.shape = {2, 1};
  out = Cycle(cs, {{g}, {}}, {false, true});
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].kind, Response::Kind::kError);
  EXPECT_NE(out[0][0].error.message().find("allgather float32[2,1] of 'rows' is not supported "
                                           "after rank(s) 1 joined"),
            std::string::npos)
      << out[0][0].error.message();
  out = Cycle(cs, {{}, {}}, {true, true});
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].kind, Response::Kind::kJoin);
  EXPECT_EQ(out[0][0].join_rank, 0);
}

}  // namespace
}  // namespace cadre::engine
