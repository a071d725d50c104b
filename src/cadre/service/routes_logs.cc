// GET /ml/v4/trainings/{id}/logs?follow=true&since=N&tail=N
//
// The job's log: every learner's lines, prefixed with the learner ("[learner-2/1] ..."), and the
// runner's own messages, in the order they were written (training.log in the job directory, so
// the log outlives the server and the job). Lines are numbered from 1:
//   since=N   only lines after line N (a follower that reconnects passes the last one it saw)
//   tail=N    only the last N lines (of those after `since`), then follow from there
//   follow    keep the response open and send lines as they are written, until the job ends
// As text (chunked; `curl -N` shows lines as they come; application/octet-stream while following,
// so that nothing on the way compresses and holds lines back) or, when the client accepts
// text/event-stream, as server-sent events: `id: <line number>` and `data: <line>`, then a
// final `event: end` whose data is the job's state. EventSource's Last-Event-ID works as since
// (and wins over the URL's); one that is not a line number of this log is answered 400.
#include <deque>
#include <memory>
#include <thread>

#include "cadre/base/printable.h"
#include "cadre/service/api.h"
#include "cadre/service/log_reader.h"
#include "cadre/service/routes.h"

namespace cadre::service {
namespace {

// The id of an event the client had: a line number, as sent (digits only).
bool ParseLastEventId(const std::string& text, int64_t* line) {
  if (text.empty() || text.size() > 18) return false;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *line = value;
  return true;
}

constexpr auto kFollowPoll = std::chrono::milliseconds(100);
// How often a follower asks the database whether the job has ended.
constexpr int kStateCheckEvery = 5;

// One of the follower places counted in ApiContext::followers, given back when the response
// (and with it the stream) is gone.
class FollowerPlace {
 public:
  explicit FollowerPlace(std::atomic<int>& followers) : followers_(followers) {}
  ~FollowerPlace() { --followers_; }
  FollowerPlace(const FollowerPlace&) = delete;
  FollowerPlace& operator=(const FollowerPlace&) = delete;

 private:
  std::atomic<int>& followers_;
};

struct LogStream {
  LogStream(std::filesystem::path file) : reader(std::move(file)) {}
  LogReader reader;
  std::unique_ptr<FollowerPlace> place;  // held while following
  std::deque<LogLine> first;             // the opening batch (after since and tail)
  bool sent_first = false;
  bool follow = false;
  bool events = false;
  int polls = 0;
  int64_t since = 0;  // lines up to this one are not sent, even when written later
  std::string ended;  // the job's final state when it had ended before the request
  std::string id;
  int64_t user_id = 0;
};

// Server-sent events end with the job's final state, so that a client tells the end of the job
// from a stream that broke (the server restarted) and follows again only after the latter.
std::string EndEvent(const std::string& state) { return "event: end\ndata: " + state + "\n\n"; }

std::string Format(const LogStream& s, const LogLine& line) {
  if (line.number <= s.since) return {};
  if (!s.events) return line.text + "\n";
  // A CR ends a field in an event stream as LF does: each CR-separated piece of the line goes out
  // as a data field of its own, so that a job printing "\revent: end" cannot forge an event
  // (clients join the pieces with LF).
  std::string out = "id: " + std::to_string(line.number) + "\ndata: ";
  for (char c : line.text) out += c == '\r' ? std::string("\ndata: ") : std::string(1, c);
  return out + "\n\n";
}

bool Send(httplib::DataSink& sink, const std::string& text) {
  return text.empty() || sink.write(text.data(), text.size());
}

// One step of the response; false ends it.
bool Produce(ApiContext& ctx, LogStream& s, httplib::DataSink& sink) {
  if (!s.sent_first) {
    s.sent_first = true;
    std::string text;
    for (const auto& line : s.first) text += Format(s, line);
    s.first.clear();
    if (s.events && !s.ended.empty()) text += EndEvent(s.ended);
    if (!Send(sink, text)) return false;
    if (!s.follow) {
      sink.done();
      return true;
    }
  }
  for (;;) {
    if (ctx.stopping || !sink.is_writable()) return false;
    std::vector<LogLine> lines = s.reader.Next();
    if (!lines.empty()) {
      std::string text;
      for (const auto& line : lines) text += Format(s, line);
      return Send(sink, text);
    }
    if (++s.polls % kStateCheckEvery == 0) {
      std::optional<TrainingRecord> r = ctx.trainings.Get(s.id, s.user_id);
      if (!r || IsFinalState(r->state)) {
        // The runner has exited: whatever it wrote is all there is.
        std::string text;
        for (const auto& line : s.reader.Rest()) text += Format(s, line);
        if (s.events) text += EndEvent(r ? r->state : "deleted");
        if (!Send(sink, text)) return false;
        sink.done();
        return true;
      }
    }
    std::this_thread::sleep_for(kFollowPoll);
  }
}

void Logs(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::optional<TrainingRecord> record = CallersTraining(ctx, req, res);
  if (!record) return;
  int64_t since = 0, tail = -1;
  if (!IntParam(req, res, "since", 0, 0, INT64_MAX, &since)) return;
  // An EventSource that reconnects sends the id of the last event it had, and the URL it was
  // first given: the id wins over that URL's since.
  const std::string last_event = req.get_header_value("Last-Event-ID");
  const bool resumed = !last_event.empty();
  if (resumed) {
    if (!ParseLastEventId(last_event, &since)) {
      SendError(res, 400, "invalid_header",
                "Last-Event-ID must be the id of a log event this server sent (a line "
                "number), got " +
                    Quoted(last_event),
                "Last-Event-ID");
      return;
    }
  }
  if (req.has_param("tail") && !IntParam(req, res, "tail", 0, 0, 1000000, &tail)) return;
  std::string follow = req.get_param_value("follow");
  if (!follow.empty() && follow != "true" && follow != "false") {
    SendError(res, 400, "invalid_parameter", "follow must be true or false, got " + Quoted(follow),
              "follow");
    return;
  }

  auto stream = std::make_shared<LogStream>(record->work_dir / "training.log");
  stream->id = record->id;
  stream->user_id = record->user_id;
  stream->since = since;
  stream->follow = follow == "true" && !IsFinalState(record->state);
  if (IsFinalState(record->state)) stream->ended = record->state;
  if (stream->follow) {
    const int max_followers = ctx.options.threads / 2;
    if (++ctx.followers > max_followers) {
      --ctx.followers;
      res.set_header("Retry-After", "5");
      SendError(res, 503, "too_many_followers",
                "the server already streams " + std::to_string(max_followers) +
                    " followed logs, half its threads (--threads); try again, or read the log "
                    "without follow");
      return;
    }
    stream->place = std::make_unique<FollowerPlace>(ctx.followers);
  }
  stream->events = req.get_header_value("Accept").find("text/event-stream") != std::string::npos;
  // The opening batch: every complete line there is now, after `since`, the last `tail` of them.
  int64_t last_line = 0;
  for (;;) {
    std::vector<LogLine> lines =
        IsFinalState(record->state) ? stream->reader.Rest() : stream->reader.Next();
    if (lines.empty()) break;
    last_line = lines.back().number;
    for (auto& line : lines) {
      if (line.number <= since) continue;
      stream->first.push_back(std::move(line));
      if (tail >= 0 && static_cast<int64_t>(stream->first.size()) > tail) {
        stream->first.pop_front();
      }
    }
  }
  if (resumed && since > last_line) {
    // Not an id this log gave (another job's, or a log that was replaced): resending from line 1
    // would repeat lines the client has, going on from it would skip the ones to come.
    SendError(res, 400, "invalid_header",
              "Last-Event-ID " + last_event + " is past the last line of this job's log (" +
                  std::to_string(last_line) + "); it must be the id of an event this log sent",
              "Last-Event-ID");
    return;
  }
  // Lines must reach the client as they are written: no caching, no proxy buffering, and no
  // MIME sniffing (browsers hold back the first KiB of a text/plain stream to sniff it).
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_header("X-Content-Type-Options", "nosniff");
  // cpp-httplib gzips text/* (but not text/event-stream) for clients that accept it, and its
  // compressor holds everything back until the end: a followed plain log goes out as bytes.
  const char* type = stream->events   ? "text/event-stream"
                     : stream->follow ? "application/octet-stream"
                                      : "text/plain; charset=utf-8";
  res.set_chunked_content_provider(type, [&ctx, stream](size_t, httplib::DataSink& sink) {
    return Produce(ctx, *stream, sink);
  });
}

}  // namespace

void AddLogRoutes(httplib::Server& server, ApiContext& ctx) {
  server.Get(R"(/ml/v4/trainings/([^/]+)/logs)",
             [&ctx](const httplib::Request& req, httplib::Response& res) { Logs(ctx, req, res); });
}

}  // namespace cadre::service
