// The libtorch side of the scorer: a TorchScript model loaded once and run on a device.
// This header names no libtorch type; torch_model.cc is the one file of the layer that includes
// libtorch, so the rest builds and tests fast.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "cadre/base/status.h"
#include "cadre/serving/model.h"
#include "cadre/serving/signature.h"

namespace cadre::serving {

// `requested`: "auto" (the first CUDA device when libtorch has CUDA and sees a GPU, else the
// CPU), "cpu", "cuda" or "cuda:N". Fails with kUnavailable when CUDA is asked for and there is
// none, saying why. On success *device is the resolved name ("cpu", "cuda:0").
Status ResolveDevice(const std::string& requested, std::string* device);

// libtorch's process-wide thread pools: `intra_op` threads inside one operator (0: libtorch's
// default), `inter_op` threads across operators (0: default). Call once, before any inference.
void ConfigureTorchThreads(int intra_op, int inter_op);

// Loads `<dir>/<signature.model_file>` onto `device` (from ResolveDevice) in evaluation mode and
// checks it with one row of zeros per input: the outputs must match the signature's count,
// dtypes and row shapes. Errors name the file and what differs.
Status LoadTorchModel(const std::filesystem::path& dir, const ModelSignature& signature,
                      const std::string& device, std::unique_ptr<Model>* out);

}  // namespace cadre::serving
