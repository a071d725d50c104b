// Which Python the learners run. The user's command says `python3`, and it must be an
// interpreter with torch; on some machines the first python3 on PATH lacks it. The runner picks
// one and puts a per-job bin folder first on PATH whose python3/python point to it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace cadre::launch {

struct PythonInfo {
  std::string interpreter;                   // absolute path; empty when there is no python3
  std::optional<std::string> torch_version;  // "1.13.0a0"; nullopt when it cannot import torch
};

// CADRE_PYTHON when set; otherwise the first of /usr/bin/python3 and PATH's python3 that has
// torch (or the first that exists). Cheap: torch is located, not imported (a subprocess reads
// torch/version.py, tens of milliseconds).
PythonInfo FindPython();

// PYTHONPATH entries that make `import cadre` work: <build>/python (the cadre binary's folder,
// where the extension is built) and the source tree's python/ folder; only those that exist.
std::string CadrePythonPath();

}  // namespace cadre::launch
