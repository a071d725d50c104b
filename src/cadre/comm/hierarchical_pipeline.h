// Internal to hierarchical.cc: the two ways LeveledAllreduce runs once it has dropped the levels
// of size 1 and the trivial cases. `levels` here are all of size > 1 (at least one), `count` > 0,
// and `scratch` points to at least the matching *ScratchBytes() bytes.
//
// - OnePassAllreduce: reduce-scatter level by level, allreduce at the top, allgather back down.
// - PipelinedAllreduce (at least two levels): the message cut into `chunks` pieces; the innermost
//   level runs on the calling thread, the levels above reduce the chunks' shards on a helper
//   thread as they become ready (see LeveledOptions::pipeline_bytes).
#pragma once

#include <cstddef>
#include <span>

#include "cadre/comm/hierarchical.h"

namespace cadre::comm::internal {

size_t OnePassScratchBytes(std::span<HierarchyGroup* const> levels, size_t count, size_t esize);
void OnePassAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                      size_t count, DataType dtype, ReduceOp op, unsigned char* scratch);

size_t PipelinedScratchBytes(std::span<HierarchyGroup* const> levels, size_t count, size_t esize,
                             size_t chunks);
void PipelinedAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                        size_t count, DataType dtype, ReduceOp op, size_t chunks,
                        unsigned char* scratch);

}  // namespace cadre::comm::internal
