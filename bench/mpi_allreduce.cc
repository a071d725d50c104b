// Open MPI's MPI_Allreduce timed exactly like `cadre bench allreduce` (float32 sum, in place,
// warm-up, barrier, back-to-back calls, the slowest rank's mean), for bench/compare_allreduce.
// Usage: mpirun -np N mpi_allreduce 4,4096,16M [LATE_US]   -> one JSON object per size on rank 0
// (sizes in the units of `cadre bench allreduce`, base/byte_size.h). As there, cpu_us is rank
// 0's CPU time per call, and with LATE_US the last rank computes (busy) that long before each
// call (`cadre bench allreduce --late-us`).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cadre/base/byte_size.h"
#include "cadre/bench/busy.h"

using cadre::bench::ThreadCpuMicros;
using cadre::bench::Work;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<size_t> sizes;
  std::string list = argc > 1 ? argv[1] : "4,4096,1048576";
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? comma : comma - pos);
    uint64_t bytes = 0;
    if (!cadre::ParseByteSize(item, &bytes).ok() || bytes < 4 || bytes % 4 != 0) {
      if (rank == 0) {
        std::fprintf(stderr,
                     "mpi_allreduce: '%s' is not a byte count, a multiple of 4 (4096, 16M)\n",
                     item.c_str());
      }
      MPI_Finalize();
      return 2;
    }
    sizes.push_back(bytes);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const int late_us = argc > 2 ? std::atoi(argv[2]) : 0;
  const bool late = late_us > 0 && rank == size - 1;
  size_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> buf(largest / 4 + 1, 1.0f);
  for (size_t bytes : sizes) {
    int count = static_cast<int>(bytes / 4);
    int iters = static_cast<int>(std::clamp<size_t>((size_t{128} << 20) / bytes, 5, 2000));
    for (int i = 0; i < std::max(2, iters / 10); ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double cpu_start = ThreadCpuMicros();
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      if (late) Work(late_us);
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - start) * 1e6 / iters;
    const double cpu_us = (ThreadCpuMicros() - cpu_start) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf(
          "{\"bytes\": %zu, \"time_us\": %.3f, \"ranks\": %d, \"iters\": %d, \"cpu_us\": %.3f, "
          "\"late_us\": %d}\n",
          bytes, us, size, iters, cpu_us, late_us);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
