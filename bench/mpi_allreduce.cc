// Open MPI's MPI_Allreduce timed exactly like `cadre bench allreduce` (float32 sum, in place,
// warm-up, barrier, back-to-back calls, the slowest rank's mean), for bench/compare_allreduce.
// Usage: mpirun -np N mpi_allreduce 4,4096,16777216   -> one JSON object per size on rank 0.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<size_t> sizes;
  std::string list = argc > 1 ? argv[1] : "4,4096,1048576";
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    sizes.push_back(std::strtoull(list.substr(pos, comma - pos).c_str(), nullptr, 10));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  size_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> buf(largest / 4 + 1, 1.0f);
  for (size_t bytes : sizes) {
    int count = static_cast<int>(bytes / 4);
    int iters = static_cast<int>(std::clamp<size_t>((size_t{128} << 20) / bytes, 5, 2000));
    for (int i = 0; i < std::max(2, iters / 10); ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - start) * 1e6 / iters;
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("{\"bytes\": %zu, \"time_us\": %.3f, \"ranks\": %d, \"iters\": %d}\n", bytes, us,
                  size, iters);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
