// How the core's ranks tell each other why a communicator failed, through the rendezvous store
// (internal to comm/, used by CommunicatorImpl::Fail). Over TCP a rank only sees its own
// neighbours' connections close; the records let every survivor name the rank at the root.
//
// Every exchange here is best effort and bounded: it runs on a thread of its own, and a caller
// that has waited `limit` goes on without it (a stopped or unreachable store must not hold a
// failing rank past its own timeout a second time). The thread holds copies of everything it
// uses, so it may outlive the communicator; it ends at the store's own timeout.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/store/store.h"

namespace cadre::comm {

struct FailureContext {
  std::shared_ptr<store::Store> store;  // prefixed for the communicator
  int rank = 0;
  std::vector<std::string> names;  // how messages name each rank
  std::string collective;          // what this rank was running ("" before any)
  // How long to wait for the other ranks' records (longer under the hierarchical allreduce,
  // whose levels record first).
  Duration record_wait{2000};
};

struct SharedFailure {
  Status status;                 // this rank's failure with the group's first added
  Code first = Code::kInternal;  // the code of the group's first failure
};

// Records this failure and what this rank called, and returns `s` with the group's first
// failure added, or one that names its cause when `s` does not (`explained`, see
// Device::failure_explained); kMismatch when that was one; nothing added when one message holds
// the other.
// nullopt when the store failed (*store_problem: its error) or took `limit` (*store_problem
// empty); a zero limit records in the background and returns nullopt at once.
std::optional<SharedFailure> ShareFailure(const FailureContext& c, const Status& s, bool explained,
                                          Duration limit, std::string* store_problem);

// After the connections are closed: `s` with what each rank called (after a mismatch), or with
// the ranks that recorded no failure named as stalled (after a timeout). `s` unchanged when the
// store failed or took `limit` beyond the records' own wait.
Status WithWhatEachRankCalled(const FailureContext& c, const Status& s, Duration limit);
Status WithRanksThatDidNotFail(const FailureContext& c, const Status& s, Duration limit);

}  // namespace cadre::comm
