// RendezvousSegment over an in-memory store: what the ranks that open a segment see of its
// creator, and how they refuse a segment laid out for other settings or one never published.
#include "cadre/transport/shm/segment.h"

#include <gtest/gtest.h>

#include <cstring>

#include "cadre/store/hash_store.h"

namespace cadre::transport::shm {
namespace {

struct TestHeader {
  SegmentStamp stamp;
  uint32_t setting;
};

// A rendezvous on `key` whose header records `setting`, which an opener must share.
SegmentRendezvous Meeting(SharedSegment* segment, uint32_t setting, uint32_t version = 1) {
  SegmentRendezvous r;
  r.key = "test-segment";
  r.creator = "rank 0 (host a)";
  r.bytes = 4096;
  r.stamp = {0x54534554, version};
  r.init = [segment, setting] { static_cast<TestHeader*>(segment->data())->setting = setting; };
  r.matches = [segment, setting] {
    return static_cast<const TestHeader*>(segment->data())->setting == setting;
  };
  return r;
}

TEST(SegmentRendezvousTest, OpenersMapWhatTheCreatorLaidOut) {
  store::HashStore store;
  SharedSegment created, opened;
  const Deadline deadline(std::chrono::seconds(5));
  ASSERT_TRUE(RendezvousSegment(store, Meeting(&created, 7), true, deadline, &created).ok());
  std::memcpy(static_cast<uint8_t*>(created.data()) + 100, "hello", 5);
  Status s = RendezvousSegment(store, Meeting(&opened, 7), false, deadline, &opened);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(opened.name(), created.name());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(opened.data()) + 100, "hello", 5), 0);
  created.Unlink();
}

TEST(SegmentRendezvousTest, ASegmentOfOtherSettingsOrVersionIsRefusedNamingItsCreator) {
  store::HashStore store;
  SharedSegment created;
  const Deadline deadline(std::chrono::seconds(5));
  ASSERT_TRUE(RendezvousSegment(store, Meeting(&created, 7), true, deadline, &created).ok());
  for (auto [setting, version] : {std::pair<uint32_t, uint32_t>{8, 1}, {7, 2}}) {
    SharedSegment opened;
    Status s =
        RendezvousSegment(store, Meeting(&opened, setting, version), false, deadline, &opened);
    EXPECT_EQ(s.code(), Code::kProtocol) << s.ToString();
    EXPECT_NE(s.message().find(created.name() + " of rank 0 (host a) has another layout"),
              std::string::npos)
        << s.message();
  }
  created.Unlink();
}

TEST(SegmentRendezvousTest, ACreatorThatNeverPublishesIsNamed) {
  store::HashStore store;
  SharedSegment opened;
  Status s = RendezvousSegment(store, Meeting(&opened, 7), false, Deadline(Duration(50)), &opened);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 (host a) did not publish its segment"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace cadre::transport::shm
