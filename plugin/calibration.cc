#include "calibration.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "json.h"

namespace nccl_dcp {
namespace plugin {

namespace {

std::string stringField(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->type == json::Value::String ? f->string : std::string();
}

int intField(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->isNumber() ? (int)f->number : 0;
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
  const json::Value* rows = doc.find("rows");
  if (rows == nullptr || rows->type != json::Value::Array) {
    c.error = "no rows[] array: not a dcp_a2a_lse_reduce_perf -J file";
    return c;
  }
  c.mode = stringField(doc, "mode");
  c.dtype = stringField(doc, "dtype");
  c.protocol = stringField(doc, "protocol");
  c.device = stringField(doc, "device");
  c.nRanks = intField(doc, "nRanks");
  c.headDim = intField(doc, "headDim");
  c.localHeads = intField(doc, "localHeads");
  for (size_t i = 0; i < rows->array.size(); i++) {
    const json::Value& r = rows->array[i];
    const json::Value* bytes = r.find("bytes");
    const json::Value* fused = r.find("fusedUs");
    const json::Value* base = r.find("baseUs");
    if (!bytes || !fused || !base || !bytes->isNumber() || !fused->isNumber() || !base->isNumber() ||
        bytes->number <= 0 || fused->number <= 0 || base->number <= 0) {
      // baseUs is 0 when the perf binary ran with -B 0: no baseline, no saving to estimate.
      c.error = "rows[" + std::to_string(i) + "] lacks a positive bytes, fusedUs or baseUs (-B 0 run?)";
      return c;
    }
    c.points.push_back({bytes->number, fused->number, base->number});
  }
  if (c.points.empty()) c.error = "rows[] is empty";
  if (c.nRanks <= 0 && c.error.empty()) c.error = "no nRanks";
  std::sort(c.points.begin(), c.points.end(),
            [](const Calibration::Point& a, const Calibration::Point& b) { return a.bytes < b.bytes; });
  return c;
}

Calibration loadCalibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    Calibration c;
    c.path = path;
    c.error = "cannot open the file";
    return c;
  }
  std::stringstream text;
  text << in.rdbuf();
  return parseCalibration(text.str(), path);
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
