#include "cadre/launch/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "cadre/base/printable.h"
#include "cadre/base/status.h"

namespace cadre::launch {
namespace {

using Keys = std::vector<std::string_view>;

// Top-level keys of both shapes; which ones mark a shape is decided in ReadManifest.
const Keys kTopKeys = {"name",
                       "description",
                       "version",
                       "framework",
                       "execution",
                       "parameter_servers",
                       "training_data_reference",
                       "training_results_reference",
                       "learners",
                       "gpus",
                       "cpus",
                       "memory",
                       "data_stores",
                       "evaluation_metrics",
                       "max_restarts",
                       "min_nodes",
                       "rejoin_after",
                       "image"};
const Keys kFrameworkKeys = {"name", "version", "command", "runtimes"};
const Keys kExecutionKeys = {"command", "compute_configuration", "backend"};
const Keys kComputeKeys = {"name", "nodes"};
const Keys kReferenceKeys = {"name", "type", "location", "connection"};
const Keys kLocationKeys = {"path"};
const Keys kDataStoreKeys = {"id", "type", "training_data", "training_results", "connection"};
const Keys kContainerKeys = {"container"};

// Bound for a file name or a parser's message in a problem (a value is cut at Quoted's 80).
constexpr size_t kMaxShownBytes = 512;

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return QuotedText(node.Scalar());
    default:
      return "nothing";
  }
}

// A key as it appears in a field path: escaped, since a manifest can hold any bytes.
std::string KeyText(const YAML::Node& key) {
  return key.IsScalar() ? EscapedText(key.Scalar()) : "<" + Describe(key) + ">";
}

// Reads one level of a manifest: checks it is a mapping, reports unknown keys, and reads typed
// values, reporting wrong types at their full path.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, const Keys& known, Problems* problems)
      : node_(node), path_(std::move(path)), problems_(problems) {
    if (!node_.IsMap()) {
      problems_->Add(path_.empty() ? "manifest" : path_,
                     "expected a mapping, got " + Describe(node_));
      ok_ = false;
      return;
    }
    std::set<std::string> seen;
    for (const auto& entry : node_) {
      std::string key = KeyText(entry.first);
      bool found = false;
      for (auto k : known) found = found || (entry.first.IsScalar() && k == entry.first.Scalar());
      // YAML keys are unique; a parser that keeps one of two silently runs what was not meant.
      if (found && !seen.insert(key).second) {
        problems_->Add(Join(path_, key), "given twice; a key may appear once in a mapping");
      }
      if (found) continue;
      std::string hint = entry.first.IsScalar() ? DidYouMean(entry.first.Scalar(), known) : "";
      std::string message = "unknown key";
      if (!hint.empty()) {
        message += " (did you mean '" + hint + "'?)";
      } else {
        message += " (known here: ";
        for (size_t i = 0; i < known.size(); ++i)
          message += (i ? ", " : "") + std::string(known[i]);
        message += ")";
      }
      problems_->Add(Join(path_, key), message);
    }
  }

  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }
  bool Has(std::string_view key) const { return ok_ && Get(key) && !Get(key).IsNull(); }
  YAML::Node Get(std::string_view key) const {
    return ok_ ? node_[std::string(key)] : YAML::Node();
  }
  std::string PathOf(std::string_view key) const { return Join(path_, key); }

  // Any scalar is a string (a version written as 1.13 is fine).
  void String(std::string_view key, Field<std::string>* out) const {
    if (!Has(key)) return;
    YAML::Node value = Get(key);
    if (!value.IsScalar()) {
      problems_->Add(PathOf(key), "expected a string, got " + Describe(value));
      out->SetUnreadable(PathOf(key));
      return;
    }
    // YAML text is Unicode; bytes that are not UTF-8 (a binary file, a Latin-1 editor) would
    // reach status.json and every message as they are.
    if (!IsUtf8(value.Scalar())) {
      problems_->Add(PathOf(key), "not UTF-8 text: " + QuotedText(value.Scalar()) +
                                      " (a manifest is UTF-8, as YAML is)");
      out->SetUnreadable(PathOf(key));
      return;
    }
    out->Set(value.Scalar(), PathOf(key));
  }

  // Only an unquoted integer: a quoted "2" is a string in YAML, and saying so beats guessing.
  void Int(std::string_view key, Field<int64_t>* out) const {
    if (!Has(key)) return;
    YAML::Node value = Get(key);
    int64_t n = 0;
    if (value.IsScalar() && value.Tag() != "!") {
      const std::string& s = value.Scalar();
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
      if (ec == std::errc() && end == s.data() + s.size()) {
        out->Set(n, PathOf(key));
        return;
      }
      if (ec == std::errc::result_out_of_range) {
        problems_->Add(PathOf(key), QuotedText(s) + " is out of range");
        out->SetUnreadable(PathOf(key));
        return;
      }
    }
    std::string got = Describe(value);
    // '3' reads as an integer to a person; YAML's quotes make it a string.
    if (value.IsScalar() && value.Tag() == "!") {
      got = "the string " + got + " (quoted; an integer is written without quotes)";
    }
    problems_->Add(PathOf(key), "expected an integer, got " + got);
    out->SetUnreadable(PathOf(key));
  }

  // A number (FfDL's cpus: 0.5); checked, not used by the local backend. With `positive`, a
  // finite number above 0.
  void CheckNumber(std::string_view key, bool positive) const {
    if (!Has(key)) return;
    YAML::Node value = Get(key);
    bool ok = value.IsScalar() && value.Tag() != "!";
    double d = 0;
    if (ok) {
      auto [end, ec] =
          std::from_chars(value.Scalar().data(), value.Scalar().data() + value.Scalar().size(), d);
      ok = ec == std::errc() && end == value.Scalar().data() + value.Scalar().size();
    }
    if (!ok) {
      problems_->Add(PathOf(key), "expected a number, got " + Describe(value));
    } else if (positive && !(d > 0 && std::isfinite(d))) {
      problems_->Add(PathOf(key), "must be a number above 0, got " + QuotedText(value.Scalar()));
    }
  }

  void CheckScalar(std::string_view key) const {
    if (Has(key) && !Get(key).IsScalar()) {
      problems_->Add(PathOf(key), "expected a string, got " + Describe(Get(key)));
    }
  }

 private:
  YAML::Node node_;
  std::string path_;
  Problems* problems_;
  bool ok_ = true;
};

// training_{data,results}_reference: only the local filesystem exists for this backend.
void ReadReference(const MapReader& top, std::string_view key, Field<std::string>* out,
                   Problems* problems) {
  if (!top.Has(key)) return;
  MapReader ref(top.Get(key), top.PathOf(key), kReferenceKeys, problems);
  if (!ref.ok()) return;
  ref.CheckScalar("name");
  Field<std::string> type;
  ref.String("type", &type);
  if (type.has_value() && *type != "fs") {
    problems->Add(type.origin,
                  QuotedText(*type) + " is not available on the local backend (valid: fs)");
  }
  if (!ref.Has("location")) {
    problems->Add(ref.PathOf("location"), "missing (location.path names the folder)");
    return;
  }
  MapReader location(ref.Get("location"), ref.PathOf("location"), kLocationKeys, problems);
  if (!location.ok()) return;
  location.String("path", out);
  if (!out->has_value()) problems->Add(location.PathOf("path"), "missing");
}

// FfDL data_stores: the first store with training_data / training_results supplies the paths.
void ReadDataStores(const MapReader& top, JobRequest* request, Problems* problems) {
  if (!top.Has("data_stores")) return;
  YAML::Node stores = top.Get("data_stores");
  if (!stores.IsSequence()) {
    problems->Add(top.PathOf("data_stores"), "expected a list, got " + Describe(stores));
    return;
  }
  for (size_t i = 0; i < stores.size(); ++i) {
    std::string path = "data_stores[" + std::to_string(i) + "]";
    MapReader store(stores[i], path, kDataStoreKeys, problems);
    if (!store.ok()) continue;
    store.CheckScalar("id");
    Field<std::string> type;
    store.String("type", &type);
    if (type.has_value() && *type != "fs" && *type != "mount_volume") {
      problems->Add(type.origin, QuotedText(*type) +
                                     " is not available on the local backend (valid: fs, "
                                     "mount_volume)");
    }
    for (auto [key, field] :
         {std::pair{std::string_view("training_data"), &request->data_path},
          std::pair{std::string_view("training_results"), &request->results_path}}) {
      if (!store.Has(key)) continue;
      MapReader container(store.Get(key), store.PathOf(key), kContainerKeys, problems);
      if (!container.ok()) continue;
      Field<std::string> value;
      container.String("container", &value);
      if (!value.has_value()) {
        problems->Add(container.PathOf("container"), "missing (the folder's path)");
      } else if (!field->has_value()) {
        *field = value;
      }
    }
  }
}

// The file's contents, if it is a regular file of at most kMaxManifestBytes. Anything else is
// refused before it is read: a symlink to /dev/zero would fill the machine's memory, a FIFO
// would hold the runner until someone wrote to it.
Status ReadManifestText(const std::filesystem::path& file, std::string* text) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return IoError(std::strerror(errno));
  struct stat st {};
  Status result;
  if (fstat(fd, &st) != 0) {
    result = IoError(std::strerror(errno));
  } else if (S_ISDIR(st.st_mode)) {
    result = IoError(std::strerror(EISDIR));
  } else if (!S_ISREG(st.st_mode)) {
    result = InvalidArgument("not a regular file");
  } else {
    char buf[65536];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) result = IoError(std::strerror(errno));
      if (n <= 0) break;
      text->append(buf, static_cast<size_t>(n));
      if (text->size() > kMaxManifestBytes) {
        result = InvalidArgument("larger than " + std::to_string(kMaxManifestBytes >> 20) +
                                 " MiB; a manifest is a few hundred bytes");
        break;
      }
    }
  }
  close(fd);
  return result;
}

}  // namespace

bool ReadManifest(const std::string& text, const std::string& source, JobRequest* request,
                  Problems* problems) {
  request->manifest_text = text;
  if (text.size() > kMaxManifestBytes) {
    // Written to a file, it would be refused by the runner that reads it.
    problems->Add(EscapedText(source, kMaxShownBytes),
                  "is " + std::to_string(text.size()) + " bytes, larger than " +
                      std::to_string(kMaxManifestBytes >> 20) +
                      " MiB; a manifest is a few hundred bytes");
    return false;
  }
  // "job.yaml:3:7", where the parser stopped.
  const auto where = [&](const YAML::Mark& mark) {
    return EscapedText(source, kMaxShownBytes) + ":" + std::to_string(mark.line + 1) + ":" +
           std::to_string(mark.column + 1);
  };
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for this is "bad file".
    problems->Add(where(e.mark), "not valid YAML: nested at least " + std::to_string(e.depth()) +
                                     " levels deep (a manifest needs a few)");
    return false;
  } catch (const YAML::Exception& e) {
    // The parser's message may hold the byte it stopped at ("unknown escape character").
    problems->Add(where(e.mark), "not valid YAML: " + EscapedText(e.msg, kMaxShownBytes));
    return false;
  }
  if (root.IsNull()) {
    problems->Add("manifest", EscapedText(source, kMaxShownBytes) + " is empty");
    return false;
  }
  MapReader top(root, "", kTopKeys, problems);
  if (!top.ok()) return false;

  top.String("name", &request->name);
  top.String("image", &request->image);
  top.CheckScalar("description");
  top.CheckScalar("version");
  top.Int("parameter_servers", &request->parameter_servers);
  top.Int("max_restarts", &request->max_restarts);
  top.Int("min_nodes", &request->min_nodes);
  top.Int("rejoin_after", &request->rejoin_after);

  MapReader framework(top.Has("framework") ? top.Get("framework") : YAML::Node(YAML::NodeType::Map),
                      "framework", kFrameworkKeys, problems);
  // A framework that is not a mapping is one problem, not a missing name as well.
  if (!framework.ok()) request->framework.SetUnreadable("framework");
  framework.String("name", &request->framework);
  framework.String("version", &request->framework_version);
  framework.String("command", &request->command);
  if (framework.Has("runtimes") && !framework.Get("runtimes").IsSequence()) {
    problems->Add("framework.runtimes",
                  "expected a list, got " + Describe(framework.Get("runtimes")));
  }

  // Which shape: FfDL keys vs WML keys; both at once is ambiguous (two commands, two counts).
  std::vector<std::string> ffdl, wml;
  for (auto key : {"learners", "gpus", "data_stores"}) {
    if (top.Has(key)) ffdl.push_back(key);
  }
  if (framework.Has("command")) ffdl.push_back("framework.command");
  for (auto key : {"execution", "training_data_reference", "training_results_reference"}) {
    if (top.Has(key)) wml.push_back(key);
  }
  if (!ffdl.empty() && !wml.empty()) {
    problems->Add("manifest", "mixes the FfDL shape (" + ffdl.front() + ") with the WML shape (" +
                                  wml.front() + "); use one shape");
  }

  if (top.Has("execution")) {
    MapReader execution(top.Get("execution"), "execution", kExecutionKeys, problems);
    if (!execution.ok() && !request->command.has_value()) {
      request->command.SetUnreadable("execution");
    }
    execution.String("command", &request->command);
    execution.String("backend", &request->backend);
    if (execution.Has("compute_configuration")) {
      MapReader compute(execution.Get("compute_configuration"), "execution.compute_configuration",
                        kComputeKeys, problems);
      compute.String("name", &request->compute);
      compute.Int("nodes", &request->nodes);
    }
  }
  ReadReference(top, "training_data_reference", &request->data_path, problems);
  ReadReference(top, "training_results_reference", &request->results_path, problems);

  top.Int("learners", &request->nodes);
  top.Int("gpus", &request->gpus);
  top.CheckNumber("cpus", /*positive=*/true);
  top.CheckScalar("memory");
  if (top.Has("evaluation_metrics") && !top.Get("evaluation_metrics").IsMap()) {
    problems->Add("evaluation_metrics",
                  "expected a mapping, got " + Describe(top.Get("evaluation_metrics")));
  }
  ReadDataStores(top, request, problems);
  return true;
}

bool LoadManifestFile(const std::filesystem::path& file, JobRequest* request, Problems* problems) {
  std::string text;
  if (Status read = ReadManifestText(file, &text); !read.ok()) {
    problems->Add("manifest", "cannot read " + EscapedText(file.string(), kMaxShownBytes) + ": " +
                                  read.message());
    return false;
  }
  std::error_code ec;
  auto absolute = std::filesystem::absolute(file, ec);
  request->base_dir = (ec ? file : absolute).parent_path();
  return ReadManifest(text, file.string(), request, problems);
}

}  // namespace cadre::launch
