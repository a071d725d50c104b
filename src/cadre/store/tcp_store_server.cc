// TcpStoreServer: every connection, key and parked request lives on the event-loop thread, so
// none of this state needs a lock; other threads only read the port and the client count.
#include <sys/epoll.h>

#include <atomic>
#include <map>
#include <set>
#include <unordered_map>

#include "cadre/base/logging.h"
#include "cadre/base/printable.h"
#include "cadre/base/status.h"
#include "cadre/net/event_loop.h"
#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"
#include "cadre/net/wire.h"
#include "cadre/store/store_util.h"
#include "cadre/store/tcp_store.h"
#include "cadre/store/tcp_store_protocol.h"

namespace cadre::store {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// A client that stops reading while its replies pile up past this is closed.
constexpr size_t kMaxOutbox = size_t{1} << 30;
// Refusals of unauthenticated connections logged before the rest are only counted, so that a port
// scanner cannot flood the runner's log.
constexpr size_t kLoggedRefusals = 8;

struct Connection {
  uint64_t id = 0;
  net::Socket socket;
  std::string peer;  // address, then "identity (address)" once authenticated
  net::FrameReader reader{net::kHandshakeMaxPayload};
  std::unique_ptr<net::HandshakeServer> handshake;  // null once authenticated
  net::EventLoop::TimerId handshake_timer = 0;
  std::vector<uint8_t> outbox;
  size_t outbox_sent = 0;
  bool want_write = false;
  // Set when a write fails. Writes happen deep inside request handling (a SET wakes parked
  // requests of other clients), where closing would free a Connection still in use; so the
  // connection is closed at the next safe point instead (CloseIfFailed).
  Status failed;
};

// A GET or WAIT parked until its keys exist.
struct Waiter {
  uint64_t connection = 0;
  uint64_t tag = 0;
  bool is_get = false;
  std::vector<std::string> keys;
  Duration timeout{0};
  net::EventLoop::TimerId timer = 0;
};

std::string ServerHost(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

}  // namespace

class TcpStoreServerImpl {
 public:
  explicit TcpStoreServerImpl(TcpStoreServerOptions options) : options_(std::move(options)) {
    ThrowIfError(net::ValidateJobToken(options_.token).WithContext("TcpStore server"));
    if (options_.max_unauthenticated < 1) {
      throw Error(InvalidArgument("TcpStore server: max_unauthenticated must be at least 1"));
    }
    Status s =
        net::Socket::Listen(options_.host, options_.port, 512, &listener_, options_.hosts_file);
    if (!s.ok()) throw Error(s.WithContext("TcpStore server"));
    port_ = listener_.local_port();
    Status added = loop_.Add(listener_.fd(), EPOLLIN, [this](uint32_t) { OnAcceptable(); });
    if (!added.ok()) throw Error(added.WithContext("TcpStore server"));
  }

  ~TcpStoreServerImpl() {
    for (auto& [id, c] : connections_) loop_.Remove(c->socket.fd());
    loop_.Remove(listener_.fd());
  }

  void Run() { loop_.Run(); }
  void Stop() { loop_.Stop(); }
  uint16_t port() const { return port_; }
  std::string address() const { return net::HostPort{ServerHost(options_.host), port_}.ToString(); }
  size_t num_clients() const { return authenticated_.load(); }
  size_t num_parked() const { return parked_.load(); }

 private:
  void OnAcceptable() {
    // Drain the backlog. A failed accept (e.g. out of descriptors) is logged, not fatal; the
    // listener is then paused briefly, since it stays readable and would otherwise spin.
    for (int i = 0; i < 64; ++i) {
      net::Socket s;
      Status st = listener_.Accept(Deadline(Duration(0)), &s);
      if (st.code() == Code::kTimeout) return;
      if (!st.ok()) {
        CADRE_LOG(WARNING) << "TcpStore server: " << st.ToString() << "; pausing accepts";
        if (loop_.Modify(listener_.fd(), 0).ok()) {
          loop_.RunAt(Clock::now() + std::chrono::milliseconds(100),
                      [this] { (void)loop_.Modify(listener_.fd(), EPOLLIN); });
        }
        return;
      }
      // Connections that have not proved the token are capped: the oldest makes room (a genuine
      // client finishes its handshake in two round trips, so the oldest is one that stalls).
      if (unauthenticated_.size() >= options_.max_unauthenticated) {
        Close(*unauthenticated_.begin(),
              TimeoutError("dropped to make room: " + std::to_string(options_.max_unauthenticated) +
                           " connections were waiting to authenticate"));
      }
      auto c = std::make_unique<Connection>();
      c->id = next_connection_++;
      c->peer = s.peer_address();
      c->socket = std::move(s);
      c->handshake = std::make_unique<net::HandshakeServer>(options_.token, "store");
      uint64_t id = c->id;
      Status added =
          loop_.Add(c->socket.fd(), EPOLLIN, [this, id](uint32_t ev) { OnEvent(id, ev); });
      if (!added.ok()) {
        CADRE_LOG(WARNING) << "TcpStore server: " << added.ToString();
        continue;
      }
      c->handshake_timer = loop_.RunAt(Clock::now() + options_.handshake_timeout, [this, id] {
        Close(id, TimeoutError("no handshake within " +
                               std::to_string(options_.handshake_timeout.count()) + " ms"));
      });
      connections_.emplace(id, std::move(c));
      unauthenticated_.insert(id);
    }
  }

  Connection* Find(uint64_t id) {
    auto it = connections_.find(id);
    return it == connections_.end() ? nullptr : it->second.get();
  }

  void OnEvent(uint64_t id, uint32_t events) {
    Connection* c = Find(id);
    if (c == nullptr) return;
    if (events & EPOLLOUT) Flush(*c);
    if (CloseIfFailed(id)) return;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(id);
  }

  // Closes the connection if a write to it failed; true when it is gone.
  bool CloseIfFailed(uint64_t id) {
    Connection* c = Find(id);
    if (c == nullptr) return true;
    if (c->failed.ok()) return false;
    Close(id, c->failed);
    return true;
  }

  void OnReadable(uint64_t id) {
    uint8_t buf[kReadChunk];
    // Bounded reads per wake-up so one busy client cannot starve the others (level-triggered).
    for (int i = 0; i < 16; ++i) {
      Connection* c = Find(id);
      if (c == nullptr) return;
      size_t got = 0;
      Status s = c->socket.RecvSome(buf, sizeof(buf), &got);
      if (!s.ok()) return Close(id, s);
      if (got == 0) return;
      c->reader.Append(buf, got);
      if (!ProcessFrames(id)) return;
    }
  }

  // Returns false when the connection was closed.
  bool ProcessFrames(uint64_t id) {
    net::FrameHeader h;
    std::vector<uint8_t> payload;
    for (;;) {
      Connection* c = Find(id);
      if (c == nullptr) return false;
      if (!c->reader.Next(&h, &payload)) {
        Status bad = c->reader.status();
        if (bad.ok()) return true;
        // Tell the client why before closing: a stranger in the handshake's terms, a client in
        // the protocol's (an ERROR of tag 0: about the connection, not one request).
        if (c->handshake) {
          Send(*c, net::EncodeRejectFrame(bad.message()));
        } else {
          ReplyError(*c, 0, bad);
        }
        Close(id, bad);
        return false;
      }
      Status s = c->handshake ? OnHandshakeFrame(*c, h, payload) : OnRequest(*c, h, payload);
      if (!s.ok()) {
        // A malformed request: the client learns what was wrong with it (kProtocol, which tells
        // it the connection is closed), then the connection closes.
        if (!c->handshake) ReplyError(*c, h.tag, Status(Code::kProtocol, s.message()));
        Close(id, s);
        return false;
      }
      if (CloseIfFailed(id)) return false;
    }
  }

  Status OnHandshakeFrame(Connection& c, const net::FrameHeader& h,
                          const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> out;
    Status s = c.handshake->OnFrame(h, payload, &out);
    Send(c, out);
    if (!s.ok()) return s;
    if (c.handshake->done()) {
      c.peer = Quoted(c.handshake->peer_identity()) + " (" + c.peer + ")";
      c.handshake.reset();
      unauthenticated_.erase(c.id);
      loop_.Cancel(c.handshake_timer);
      c.reader.set_max_payload(wire::kMaxPayload);
      ++authenticated_;
    }
    return Status::Ok();
  }

  Status OnRequest(Connection& c, const net::FrameHeader& h, const std::vector<uint8_t>& payload) {
    net::WireReader r(payload);
    switch (h.type) {
      case wire::kSet: {
        std::string key;
        std::vector<uint8_t> value;
        CADRE_RETURN_IF_ERROR(r.GetString("key", kMaxKeyBytes, &key));
        CADRE_RETURN_IF_ERROR(r.GetBytes("value", kMaxValueBytes, &value));
        CADRE_RETURN_IF_ERROR(r.ExpectEnd("SET"));
        data_[key] = std::move(value);
        Reply(c, h.tag, wire::kOk, {});
        Notify(key);
        return Status::Ok();
      }
      case wire::kAdd: {
        std::string key;
        int64_t delta = 0;
        CADRE_RETURN_IF_ERROR(r.GetString("key", kMaxKeyBytes, &key));
        CADRE_RETURN_IF_ERROR(r.GetI64("delta", &delta));
        CADRE_RETURN_IF_ERROR(r.ExpectEnd("ADD"));
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end()) {
          try {
            value = DecodeCounter(key, it->second);
          } catch (const Error& e) {
            ReplyError(c, h.tag, e.status());
            return Status::Ok();
          }
        }
        value += delta;
        data_[key] = EncodeCounter(value);
        net::WireWriter w;
        w.PutI64(value);
        Reply(c, h.tag, wire::kValue, w.data());
        Notify(key);
        return Status::Ok();
      }
      case wire::kCheck: {
        std::vector<std::string> keys;
        CADRE_RETURN_IF_ERROR(ReadKeys(r, &keys));
        CADRE_RETURN_IF_ERROR(r.ExpectEnd("CHECK"));
        net::WireWriter w;
        w.PutU8(Missing(keys).empty() ? 1 : 0);
        Reply(c, h.tag, wire::kValue, w.data());
        return Status::Ok();
      }
      case wire::kGet:
      case wire::kWait: {
        uint64_t timeout_ms = 0;
        std::vector<std::string> keys;
        CADRE_RETURN_IF_ERROR(r.GetU64("timeout_ms", &timeout_ms));
        if (h.type == wire::kGet) {
          keys.emplace_back();
          CADRE_RETURN_IF_ERROR(r.GetString("key", kMaxKeyBytes, &keys[0]));
        } else {
          CADRE_RETURN_IF_ERROR(ReadKeys(r, &keys));
        }
        CADRE_RETURN_IF_ERROR(r.ExpectEnd(h.type == wire::kGet ? "GET" : "WAIT"));
        Park(c, h.tag, h.type == wire::kGet, std::move(keys), timeout_ms);
        return Status::Ok();
      }
      default:
        return ProtocolError("unknown store request type " + std::to_string(h.type));
    }
  }

  static Status ReadKeys(net::WireReader& r, std::vector<std::string>* keys) {
    uint32_t n = 0;
    CADRE_RETURN_IF_ERROR(r.GetU32("key count", &n));
    // Every key takes at least its 4-byte length, so a count the payload cannot hold is garbage.
    if (n > r.remaining() / 4)
      return ProtocolError("key count " + std::to_string(n) + " too large");
    keys->resize(n);
    for (auto& k : *keys) CADRE_RETURN_IF_ERROR(r.GetString("key", kMaxKeyBytes, &k));
    return Status::Ok();
  }

  std::vector<std::string> Missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!data_.count(k)) missing.push_back(k);
    }
    return missing;
  }

  void Park(Connection& c, uint64_t tag, bool is_get, std::vector<std::string> keys,
            uint64_t timeout_ms) {
    Waiter w{c.id, tag, is_get, std::move(keys), Duration(0), 0};
    std::vector<std::string> missing = Missing(w.keys);
    if (missing.empty()) return Complete(c, w);
    // Cap the timeout so the time point below cannot overflow.
    w.timeout = Duration(std::min<uint64_t>(timeout_ms, uint64_t{1} << 40));
    uint64_t wid = next_waiter_++;
    w.timer = loop_.RunAt(Clock::now() + w.timeout, [this, wid] { Expire(wid); });
    for (const auto& k : missing) waiters_by_key_[k].push_back(wid);
    waiters_.emplace(wid, std::move(w));
    parked_ = waiters_.size() + waiters_by_key_.size();
  }

  // Drops a parked request that ends without its keys (expired, or its client left) from the
  // index by key, so that requests for keys nobody sets do not pile up there.
  void Unindex(uint64_t wid, const Waiter& w) {
    for (const auto& k : w.keys) {
      auto idx = waiters_by_key_.find(k);
      if (idx == waiters_by_key_.end()) continue;
      std::erase(idx->second, wid);
      if (idx->second.empty()) waiters_by_key_.erase(idx);
    }
  }

  void Complete(Connection& c, const Waiter& w) {
    if (w.is_get) {
      net::WireWriter out;
      out.PutRaw(data_.at(w.keys[0]));
      Reply(c, w.tag, wire::kValue, out.data());
    } else {
      Reply(c, w.tag, wire::kOk, {});
    }
  }

  void Expire(uint64_t wid) {
    auto it = waiters_.find(wid);
    if (it == waiters_.end()) return;
    Waiter w = std::move(it->second);
    waiters_.erase(it);
    Unindex(wid, w);
    parked_ = waiters_.size() + waiters_by_key_.size();
    if (Connection* c = Find(w.connection)) {
      ReplyError(*c, w.tag, TimeoutError(MissingKeysMessage(Missing(w.keys), w.timeout)));
      CloseIfFailed(w.connection);
    }
  }

  // Wakes the parked requests that were waiting on `key` and now have every key.
  void Notify(const std::string& key) {
    auto idx = waiters_by_key_.find(key);
    if (idx == waiters_by_key_.end()) return;
    std::vector<uint64_t> ids = std::move(idx->second);
    waiters_by_key_.erase(idx);
    for (uint64_t wid : ids) {
      auto it = waiters_.find(wid);
      if (it == waiters_.end() || !Missing(it->second.keys).empty()) continue;
      Waiter w = std::move(it->second);
      waiters_.erase(it);
      loop_.Cancel(w.timer);
      if (Connection* c = Find(w.connection)) Complete(*c, w);
    }
    parked_ = waiters_.size() + waiters_by_key_.size();
  }

  void ReplyError(Connection& c, uint64_t tag, const Status& status) {
    net::WireWriter w;
    w.PutU8(static_cast<uint8_t>(status.code()));
    w.PutString(status.message());
    Reply(c, tag, wire::kError, w.data());
  }

  void Reply(Connection& c, uint64_t tag, uint8_t type, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> frame(net::kFrameHeaderSize + payload.size());
    net::EncodeFrameHeader({net::kProtocolVersion, type, 0, tag, payload.size()}, frame.data());
    std::copy(payload.begin(), payload.end(), frame.begin() + net::kFrameHeaderSize);
    Send(c, frame);
  }

  // Queues bytes and writes what the socket takes now; the rest goes out on EPOLLOUT.
  // Never closes the connection (see Connection::failed).
  void Send(Connection& c, const std::vector<uint8_t>& bytes) {
    if (bytes.empty() || !c.failed.ok()) return;
    c.outbox.insert(c.outbox.end(), bytes.begin(), bytes.end());
    Flush(c);
  }

  void Flush(Connection& c) {
    while (c.failed.ok() && c.outbox_sent < c.outbox.size()) {
      size_t sent = 0;
      c.failed = c.socket.SendSome(c.outbox.data() + c.outbox_sent, c.outbox.size() - c.outbox_sent,
                                   &sent);
      if (sent == 0) break;
      c.outbox_sent += sent;
    }
    if (!c.failed.ok()) return;
    if (c.outbox_sent == c.outbox.size()) {
      c.outbox.clear();
      c.outbox_sent = 0;
    } else if (c.outbox.size() - c.outbox_sent > kMaxOutbox) {
      c.failed = IoError("client is not reading its replies");
      return;
    }
    bool want_write = !c.outbox.empty();
    if (want_write != c.want_write) {
      c.want_write = want_write;
      c.failed = loop_.Modify(c.socket.fd(), EPOLLIN | (want_write ? EPOLLOUT : 0u));
    }
  }

  void Close(uint64_t id, const Status& why) {
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    Connection& c = *it->second;
    // A client going away after it is done is the normal end of a connection. Refusals before
    // authentication are logged up to kLoggedRefusals, then only counted.
    if (c.handshake) {
      if (++refused_ <= kLoggedRefusals) {
        CADRE_LOG(WARNING) << "TcpStore server: refused client " << c.peer << ": " << why.ToString()
                           << (refused_ == kLoggedRefusals ? " (further refusals are not logged)"
                                                           : "");
      }
    } else if (why.code() != Code::kIo) {
      CADRE_LOG(WARNING) << "TcpStore server: closing client " << c.peer << ": " << why.ToString();
    } else {
      CADRE_LOG(DEBUG) << "TcpStore server: client " << c.peer << " left: " << why.ToString();
    }
    if (c.handshake) {
      loop_.Cancel(c.handshake_timer);
      unauthenticated_.erase(id);
    }
    if (!c.handshake) --authenticated_;
    for (auto w = waiters_.begin(); w != waiters_.end();) {
      if (w->second.connection == id) {
        loop_.Cancel(w->second.timer);
        Unindex(w->first, w->second);
        w = waiters_.erase(w);
      } else {
        ++w;
      }
    }
    loop_.Remove(c.socket.fd());
    connections_.erase(it);
    parked_ = waiters_.size() + waiters_by_key_.size();
  }

  TcpStoreServerOptions options_;
  net::EventLoop loop_;
  net::Socket listener_;
  uint16_t port_ = 0;
  std::atomic<size_t> authenticated_{0};
  std::atomic<size_t> parked_{0};  // waiters_ and waiters_by_key_ entries, for num_parked()
  uint64_t next_connection_ = 1;
  uint64_t next_waiter_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::set<uint64_t> unauthenticated_;  // ids of connections mid-handshake, oldest first
  size_t refused_ = 0;
  std::map<std::string, Bytes> data_;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_by_key_;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : impl_(std::make_unique<TcpStoreServerImpl>(std::move(options))) {
  thread_ = std::thread([this] { impl_->Run(); });
}

TcpStoreServer::~TcpStoreServer() {
  impl_->Stop();
  thread_.join();
}

uint16_t TcpStoreServer::port() const { return impl_->port(); }
std::string TcpStoreServer::address() const { return impl_->address(); }
size_t TcpStoreServer::num_clients() const { return impl_->num_clients(); }
size_t TcpStoreServer::num_parked() const { return impl_->num_parked(); }

}  // namespace cadre::store
