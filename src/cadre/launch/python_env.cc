#include "cadre/launch/python_env.h"

#include <unistd.h>

#include <sstream>
#include <vector>

#include "cadre/base/env.h"
#include "cadre/launch/process.h"

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

// Prints torch's version without importing torch (importing takes seconds).
constexpr const char* kProbe =
    "import importlib.util as u, os, re\n"
    "s = u.find_spec('torch')\n"
    "p = os.path.join(s.submodule_search_locations[0], 'version.py') if s else ''\n"
    "m = re.search(r\"__version__\\s*=\\s*['\\\"]([^'\\\"]+)\", open(p).read()) if p and "
    "os.path.exists(p) else None\n"
    "print(m.group(1) if m else ('unknown' if s else ''))\n";

std::optional<std::string> ProbeTorch(const std::string& python) {
  CaptureResult result;
  Status st = RunAndCapture({python, "-c", kProbe}, std::chrono::seconds(10), &result);
  if (!st.ok() || result.exit_code != 0) return std::nullopt;
  std::string v = result.output;
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  if (v.empty()) return std::nullopt;
  return v;
}

std::string OnPath(const std::string& name) {
  auto path = GetEnv("PATH");
  if (!path) return "";
  std::stringstream dirs(*path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

}  // namespace

PythonInfo FindPython() {
  if (auto forced = GetEnv("CADRE_PYTHON")) {
    std::string path = forced->find('/') == std::string::npos ? OnPath(*forced) : *forced;
    return {path.empty() ? *forced : path, ProbeTorch(path.empty() ? *forced : path)};
  }
  std::vector<std::string> candidates;
  if (access("/usr/bin/python3", X_OK) == 0) candidates.push_back("/usr/bin/python3");
  if (std::string p = OnPath("python3"); !p.empty() && p != "/usr/bin/python3") {
    candidates.push_back(p);
  }
  for (const auto& c : candidates) {
    if (auto v = ProbeTorch(c)) return {c, v};
  }
  return {candidates.empty() ? "" : candidates.front(), std::nullopt};
}

std::string CadrePythonPath() {
  std::vector<fs::path> dirs;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / "python");
#ifdef CADRE_SOURCE_DIR
  dirs.push_back(fs::path(CADRE_SOURCE_DIR) / "python");
#endif
  std::string out;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d, ec)) continue;
    if (!out.empty()) out += ":";
    out += d.string();
  }
  return out;
}

}  // namespace cadre::launch
