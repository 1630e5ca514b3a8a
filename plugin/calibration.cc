#include "calibration.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "json.h"

namespace nccl_dcp {
namespace plugin {

namespace {

std::string stringField(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->type == json::Value::String ? f->string : std::string();
}

// The time of a results[] entry's timing object (out_of_place, baseline), or null.
const json::Value* timeOf(const json::Value& result, const char* timing) {
  const json::Value* t = result.find(timing);
  return t && t->type == json::Value::Object ? t->find("time") : nullptr;
}

int intField(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->isNumber() && f->number >= 0 && f->number <= INT_MAX ? (int)f->number : 0;
}

// Up to `limit` bytes of `fd` into *text; false with *why past that.
bool readAll(int fd, size_t limit, std::string* text, std::string* why) {
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::string("cannot read the file: ") + strerror(errno);
      return false;
    }
    text->append(buf, n);
    if (text->size() > limit) {
      *why = "larger than " + std::to_string(limit >> 10) + " KiB: not a perf -J table";
      return false;
    }
  }
}

// The text of a small regular file, or false with *why. Opened
// non-blocking and without following a link, so that a FIFO (which would
// wait for a writer), a device or a planted link costs finalize nothing.
bool readSmallFile(const std::string& path, std::string* text, std::string* why) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ELOOP ? "a symbolic link (not followed)" : std::string("cannot open the file: ") + strerror(errno);
    return false;
  }
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) *why = "not a regular file";
  ok = ok && readAll(fd, kMaxCalibrationBytes, text, why);
  close(fd);
  return ok;
}

}  // namespace

Calibration parseCalibration(const std::string& text, const std::string& path) {
  Calibration c;
  c.path = path;
  json::Value doc;
  std::string why;
  if (!json::parse(text, &doc, &why)) {
    c.error = "not JSON (" + why + ")";
    return c;
  }
  // Today's perf -J files are nccl-tests' JSON: results[] with size and
  // out_of_place.time (the fused call) and baseline.time, the shape in
  // snake_case; older ones had a camelCase rows[] (bytes, fusedUs, baseUs).
  const json::Value* results = doc.find("results");
  const json::Value* rows = doc.find("rows");
  const bool current = results != nullptr && results->type == json::Value::Array &&
                       !(rows != nullptr && rows->type == json::Value::Array);
  if (current) rows = results;
  if (rows == nullptr || rows->type != json::Value::Array) {
    c.error = "no results[] (nor an older rows[]) array: not a dcp_a2a_lse_reduce_perf -J file";
    return c;
  }
  c.mode = stringField(doc, "mode");
  c.dtype = stringField(doc, "dtype");
  c.protocol = stringField(doc, "protocol");
  c.device = stringField(doc, "device");
  c.nRanks = intField(doc, current ? "n_ranks" : "nRanks");
  c.headDim = intField(doc, current ? "head_dim" : "headDim");
  c.localHeads = intField(doc, current ? "local_heads" : "localHeads");
  const char* const array = current ? "results" : "rows";
  for (size_t i = 0; i < rows->array.size(); i++) {
    const json::Value& r = rows->array[i];
    const json::Value* bytes = r.find(current ? "size" : "bytes");
    const json::Value* fused = current ? timeOf(r, "out_of_place") : r.find("fusedUs");
    const json::Value* base = current ? timeOf(r, "baseline") : r.find("baseUs");
    if (!bytes || !fused || !base || !bytes->isNumber() || !fused->isNumber() || !base->isNumber() ||
        bytes->number <= 0 || fused->number <= 0 || base->number <= 0) {
      // No baseline time when the perf binary ran with -B 0: no saving to estimate.
      c.error = std::string(array) + "[" + std::to_string(i) + "] lacks a positive " +
                (current ? "size, out_of_place.time or baseline.time" : "bytes, fusedUs or baseUs") + " (-B 0 run?)";
      return c;
    }
    c.points.push_back({bytes->number, fused->number, base->number});
  }
  if (c.points.empty()) c.error = std::string(array) + "[] is empty";
  if (c.nRanks <= 0 && c.error.empty()) c.error = current ? "no n_ranks" : "no nRanks";
  std::sort(c.points.begin(), c.points.end(),
            [](const Calibration::Point& a, const Calibration::Point& b) { return a.bytes < b.bytes; });
  return c;
}

Calibration loadCalibration(const std::string& path) {
  std::string text, why;
  if (readSmallFile(path, &text, &why)) return parseCalibration(text, path);
  Calibration c;
  c.path = path;
  c.error = why;
  return c;
}

bool Calibration::at(double bytes, double* fusedUs, double* baseUs) const {
  if (!usable() || bytes < points.front().bytes || bytes > points.back().bytes) return false;
  auto hi = std::lower_bound(points.begin(), points.end(), bytes,
                             [](const Point& p, double b) { return p.bytes < b; });
  if (hi->bytes == bytes || hi == points.begin()) {
    *fusedUs = hi->fusedUs;
    *baseUs = hi->baseUs;
    return true;
  }
  const Point& lo = *(hi - 1);
  const double t = (bytes - lo.bytes) / (hi->bytes - lo.bytes);
  *fusedUs = lo.fusedUs + t * (hi->fusedUs - lo.fusedUs);
  *baseUs = lo.baseUs + t * (hi->baseUs - lo.baseUs);
  return true;
}

}  // namespace plugin
}  // namespace nccl_dcp
