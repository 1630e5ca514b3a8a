/*************************************************************************
 * The fused path's expected time for a size, from the table the perf
 * binary writes with -J (perf/report.cc jsonReport): nccl-tests' results[]
 * of {size, out_of_place.time (the fused call), baseline.time}, measured
 * in one run for one shape (n_ranks, dtype, head_dim, local_heads); older
 * files' rows[] of {bytes, fusedUs, baseUs} too. `size` is what each rank's
 * partial outputs weigh: the size of the all-to-all the fused call
 * replaces, so an all-to-all seen in a job is looked up by its bytes.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_CALIBRATION_H_
#define NCCL_DCP_PLUGIN_CALIBRATION_H_

#include <cstddef>
#include <string>
#include <vector>

namespace nccl_dcp {
namespace plugin {

struct Calibration {
  struct Point {
    double bytes, fusedUs, baseUs;
  };
  std::string path;
  std::string error;  // non-empty: not usable, and why
  std::string mode, dtype, protocol, device;
  int nRanks = 0, headDim = 0, localHeads = 0;
  std::vector<Point> points;  // ascending bytes

  bool usable() const { return error.empty() && !points.empty(); }
  // Times at `bytes`, linear between the two nearest points; false outside
  // the measured range (no extrapolation).
  bool at(double bytes, double* fusedUs, double* baseUs) const;
};

// A perf -J table is a few KiB; a larger file is refused unread.
constexpr size_t kMaxCalibrationBytes = 1 << 20;

// Reads a perf JSON file; on any problem the result names it in `error`.
// Only a regular file, not through a symbolic link, of at most
// kMaxCalibrationBytes: a FIFO, a device or a link is refused at once.
Calibration loadCalibration(const std::string& path);
// The same from the file's text (tests).
Calibration parseCalibration(const std::string& text, const std::string& path);

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_CALIBRATION_H_
