// LinkRelay: the user-space link emulator, for kernels without the netem qdisc.
//
// Every endpoint of the emulated network (the switch and each host) has a TUN device in its own
// namespace; the relay owns their descriptors. One thread reads the IP packets each endpoint
// sends, routes them by destination address and releases each one to its destination's TUN when
// LinkModel says it arrives (rate, delay, loss, drop-tail buffers; see link_model.h).
//
// Backpressure: the relay reads from a sender only while the sender's uplink has less than
// kReadAheadNs of data queued; otherwise the packets wait in the sender's TUN queue (1000 packets,
// like a NIC's, drop-tail beyond). So a TCP sender is held back by its window, not by losses of
// whole 64 KB GSO packets that would cost it a retransmission timeout, and the relay holds little.
// The thread sleeps in epoll between packets (nanosecond timeouts, 1 us timer slack), so an idle
// network costs no CPU and a busy one a few thousand wake-ups a second per Gbit/s.
//
// Failure: a read or epoll error the relay cannot survive stops it; health() then returns that
// error (callers that run jobs poll it and fail the job rather than let learners wait on a dead
// network). A packet the destination refuses is counted and dropped, as a NIC would.
//
// Thread-safety: all methods may be called from any thread while the relay runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/netem/link_model.h"
#include "cadre/netem/link_spec.h"

namespace cadre::netem {

// What the relay did with the packets it read, since it started.
struct RelayStats {
  uint64_t delivered = 0;     // written to their destination's TUN
  uint64_t lost = 0;          // dropped by the emulated loss
  uint64_t queue_full = 0;    // dropped by a full port buffer
  uint64_t disconnected = 0;  // from or to a host that was cut off
  uint64_t unroutable = 0;    // not IPv4, or for no endpoint (e.g. broadcasts, IPv6 discovery)
  uint64_t refused = 0;       // the destination TUN would not take them
};

class LinkRelay {
 public:
  // Takes ownership of the TUN descriptors (non-blocking; [0] the switch's, [1 + i] host i's)
  // and starts relaying with every host on `link`; `seed` drives the loss decisions. Each read
  // and write is `packet_prefix` bytes of device header (kTunPacketPrefix for the emulator's
  // TUNs), passed on unchanged, then one IP packet. On failure the descriptors are closed.
  static Status Start(std::vector<int> tun_fds, const LinkSpec& link, uint64_t seed,
                      size_t packet_prefix, std::unique_ptr<LinkRelay>* out);
  ~LinkRelay();
  LinkRelay(const LinkRelay&) = delete;
  LinkRelay& operator=(const LinkRelay&) = delete;

  // Stops the thread and closes the descriptors (which removes the TUN devices). Idempotent.
  void Stop();

  // Live changes; packets already on their way keep their times.
  void SetHostLink(int host, const LinkSpec& link);
  void SetHostConnected(int host, bool connected);

  // Ok while relaying (and after a Stop()); the error that stopped the relay otherwise.
  Status health() const;
  RelayStats stats() const;

 private:
  struct Packet {
    int64_t at = 0;  // when the next step happens (ns, CLOCK_MONOTONIC)
    uint64_t order = 0;
    bool at_switch = true;  // reaching the switch (then Forward), else delivery
    int src = 0;
    int dst = 0;
    size_t wire = 0;
    size_t len = 0;
    std::vector<uint8_t> data;
  };
  struct Later {
    bool operator()(const Packet& a, const Packet& b) const {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  LinkRelay(std::vector<int> fds, const LinkSpec& link, uint64_t seed, size_t packet_prefix);
  void Run();
  // Reads what endpoint `src` has sent (a bounded batch, so no sender starves the others).
  // Returns false on a fatal error (recorded).
  bool ReadFrom(int src);
  // Handles every queued packet whose time has come.
  void ReleaseDue(int64_t now);
  // Stops watching endpoint `src` until `until` (its uplink is busy); ResumeDue starts again.
  // Return false on a fatal error (recorded).
  bool Pause(int src, int64_t until);
  bool ResumeDue(int64_t now);
  // The next time the thread must wake up without a packet to read (-1: none).
  int64_t NextWake() const;
  void Schedule(Packet packet);
  void Count(Fate fate);
  void Recycle(std::vector<uint8_t> buffer);
  void Fail(Status status);

  std::vector<int> fds_;
  const size_t packet_prefix_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;

  mutable std::mutex model_mutex_;
  LinkModel model_;  // guarded by model_mutex_

  // Owned by the relay thread.
  std::vector<Packet> queue_;  // a heap ordered by Later
  std::vector<std::vector<uint8_t>> spare_buffers_;
  std::vector<int64_t> resume_at_;  // per endpoint: when to read again; 0 while reading
  int paused_ = 0;                  // endpoints with resume_at_ set
  uint64_t next_order_ = 0;

  mutable std::mutex failure_mutex_;
  Status failure_;  // guarded by failure_mutex_

  std::atomic<uint64_t> delivered_{0}, lost_{0}, queue_full_{0}, disconnected_{0}, unroutable_{0},
      refused_{0};
};

}  // namespace cadre::netem
