// The fp64 oracle (oracle.h): DESIGN §1 from the public header only.
// Nothing of src/ is included here, by design.
#include "oracle.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

namespace oracle {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kLn2 = std::log(2.0);

double halfBitsToDouble(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp((double)mantissa, -24);  // subnormal
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN() : kInf;
  else v = std::ldexp((double)(mantissa | 0x400), exponent - 25);
  return sign ? -v : v;
}

int elementSize(ncclDataType_t dtype) { return dtype == ncclFloat32 ? 4 : 2; }

bool finite(double x) { return std::isfinite(x); }

}  // namespace

double decode(ncclDataType_t dtype, const void* base, int64_t i) {
  switch (dtype) {
    case ncclBfloat16: {
      uint16_t h;
      memcpy(&h, (const char*)base + 2 * i, 2);
      const uint32_t bits = uint32_t(h) << 16;  // bf16 is the top half of an fp32
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    case ncclFloat16: {
      uint16_t h;
      memcpy(&h, (const char*)base + 2 * i, 2);
      return halfBitsToDouble(h);
    }
    default: {
      float f;
      memcpy(&f, (const char*)base + 4 * i, 4);
      return f;
    }
  }
}

double sanitize(double lse) { return std::isnan(lse) || lse == kInf ? -kInf : lse; }

std::vector<int> rowStarts(const Problem& p) {
  std::vector<int> start(p.cp + 1, 0);
  for (int r = 0; r < p.cp; r++) {
    const int rows = p.rowCounts.empty() ? p.batch / p.cp + (r < p.batch % p.cp ? 1 : 0) : p.rowCounts[r];
    start[r + 1] = start[r] + rows;
  }
  return start;
}

bool rowIsEmpty(const Problem& p, int rank, int row) {
  const Rank& r = p.ranks[rank];
  if (p.numSeqs == 0 || r.seqLens == nullptr) return false;
  const int* qsl = r.queryStartLoc;
  if (row < qsl[0] || row >= qsl[p.numSeqs]) return true;  // padding
  // A linear scan: sequences of no rows (equal offsets) hold no row.
  for (int i = 0; i < p.numSeqs; i++)
    if (qsl[i] <= row && row < qsl[i + 1]) return r.seqLens[i] <= 0;
  return true;
}

bool place(const Problem& p, const std::vector<int>& start, int r, int row, int head, int* outRow, int* outHead) {
  const int Hl = p.localHeads;
  switch (p.mode) {
    case Mode::Head:
      if (head / Hl != r) return false;
      *outRow = row;
      *outHead = head - r * Hl;
      return true;
    case Mode::Token:
      if (row < start[r] || row >= start[r + 1]) return false;
      *outRow = row - start[r];
      *outHead = head;
      return true;
    default:
      *outRow = row;
      *outHead = head;
      return true;
  }
}

namespace e4m3 {

uint8_t encode(float v) {
  if (!std::isfinite(v)) return kNaN;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs((double)v);
  if (a >= kMax) return sign | 0x7e;  // saturating: 448 is S.1111.110
  uint8_t code;
  if (a < 0x1p-6) {
    // Subnormals: m * 2^-9, m in 0..7; m = 8 is the smallest normal (0x08).
    const double m = std::nearbyint(a * 0x1p9);  // ties to even (the default rounding mode)
    code = (uint8_t)m;
  } else {
    int e;
    std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
    e -= 1;             // a in [2^e, 2^(e+1)), e in -6..8
    double m = std::nearbyint(std::ldexp(a, 3 - e));  // 8..16: 3 mantissa bits
    if (m == 16) {
      m = 8;
      e += 1;
    }
    code = (uint8_t)(((e + 7) << 3) | ((int)m - 8));
    if (code > 0x7e) code = 0x7e;  // 448 rounds to itself; nothing above it reaches here
  }
  return sign | code;
}

double decode(uint8_t q) {
  const int exponent = (q >> 3) & 0xf, mantissa = q & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = exponent == 0 ? std::ldexp((double)mantissa, -9) : std::ldexp((double)(8 + mantissa), exponent - 10);
  return (q & 0x80) ? -v : v;
}

float scale(float amax) { return amax >= 0x1p-100f ? amax / kMax : 1.f; }

float inverse(float amax, float scale) {
  if (scale == e4m3::scale(amax)) return amax >= 0x1p-100f ? kMax / amax : 1.f;
  return 1.f / scale;
}

}  // namespace e4m3

Merge merge(const Problem& p, int row, int head, ScaleRule rule) {
  return merge(p, row, head, p.mode == Mode::Head ? head / p.localHeads : -1, rule);
}

Merge merge(const Problem& p, int row, int head, int receiver, ScaleRule rule) {
  const int cp = p.cp, D = p.headDim, Hl = p.localHeads;
  const int peer = head / Hl, j = head % Hl;
  const bool base2 = p.base == Base::Two, fp8 = p.wire == Wire::Fp8;
  const double lnBase = base2 ? kLn2 : 1.0;
  const Layout& s = p.layout;
  Merge m;
  m.receiver = receiver;
  std::vector<double> l(cp), w(cp);
  double mx = -kInf;
  for (int src = 0; src < cp; src++) {
    l[src] = rowIsEmpty(p, src, row)
                 ? -kInf
                 : sanitize(decode(p.lseDtype, p.ranks[src].partialLse, row * s.lseRow + peer * s.lsePeer + j * s.lseHead));
    mx = std::max(mx, l[src]);
  }
  if (mx == -kInf) mx = 0;
  double W = 0;
  for (int src = 0; src < cp; src++) {
    w[src] = l[src] == -kInf ? 0.0 : (base2 ? std::exp2(l[src] - mx) : std::exp(l[src] - mx));
    W += w[src];
  }
  m.empty = W == 0;
  m.lse = m.empty ? -kInf : mx + (base2 ? std::log2(W) : std::log(W));
  for (int src = 0; src < cp && !m.empty; src++)
    if (w[src] != 0) m.lseSlack += w[src] / W * std::fabs(l[src] - mx);
  m.out.assign(D, 0.0);
  m.mag.assign(D, 0.0);
  m.magD.assign(D, 0.0);
  if (fp8) {
    m.fp8.assign(D, 0.0);
    m.fp8Err.assign(D, 0.0);
  }
  if (m.empty) return m;
  for (int src = 0; src < cp; src++) {
    if (w[src] == 0) continue;  // an empty source's payload may be NaN: never read into the sums
    const double weight = w[src] / W, dl = std::fabs(l[src] - mx) * lnBase;
    const int64_t at = row * s.inRow + peer * s.inPeer + j * s.inHead;
    const void* in = p.ranks[src].partialOut;
    const bool remote = fp8 && src != m.receiver;
    float unitScale = 1.f, unitInverse = 1.f;
    if (remote) {
      float amax = 0.f;  // over the unit's finite elements
      for (int d = 0; d < D; d++) {
        const double x = decode(p.dtype, in, at + d);
        if (finite(x)) amax = std::max(amax, (float)std::fabs(x));
      }
      unitScale = rule(amax);
      unitInverse = e4m3::inverse(amax, unitScale);
    }
    for (int d = 0; d < D; d++) {
      const double x = decode(p.dtype, in, at + d);
      m.out[d] += weight * x;
      m.mag[d] += std::fabs(weight * x);
      m.magD[d] += std::fabs(weight * x) * dl;
      if (!fp8) continue;
      if (!remote) {
        m.fp8[d] += weight * x;
        continue;
      }
      // The receiver's view of the element: fl32(decode(encode(fl32(x * inverse))) * scale).
      const float xf = (float)x;
      const double wire = finite(x) ? (double)((float)e4m3::decode(e4m3::encode(xf * unitInverse)) * unitScale)
                                    : std::numeric_limits<double>::quiet_NaN();
      m.fp8[d] += weight * wire;
      if (finite(x)) m.fp8Err[d] += weight * (0x1p-4 * std::fabs(x) + 0x1p-10 * (double)unitScale);
    }
  }
  return m;
}

double roundoff(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclBfloat16: return 0x1p-8;
    case ncclFloat16: return 0x1p-11;
    default: return 0x1p-24;
  }
}

namespace {

// Half the smallest subnormal step of an output dtype (the rounding of a
// tiny merge), at least a hair above 0.
double tinyOf(ncclDataType_t dtype) { return dtype == ncclFloat16 ? 0x1p-25 : 1e-37; }

// The native bound around a value of magnitude `value` whose terms sum
// to `mag` in magnitude (magD: the terms weighted by their |l - m|).
double nativeBound(const Problem& p, double value, double mag, double magD) {
  return roundoff(p.dtype) * std::fabs(value) + (2.0 * p.cp + 8) * 0x1p-24 * mag + 0x1p-24 * magD + tinyOf(p.dtype);
}

}  // namespace

double outTolerance(const Problem& p, const Merge& m, int d) {
  if (p.wire != Wire::Fp8) return nativeBound(p, m.out[d], m.mag[d], m.magD[d]);
  const double err = m.fp8Err[d] * (1 + 0x1p-20);  // + the fp32 roundings of x * inverse and q * scale
  return nativeBound(p, std::fabs(m.out[d]) + err, m.mag[d] + err, m.magD[d] * (1 + 0x1p-4)) + err;
}

double lseTolerance(const Problem& p, const Merge& m) {
  return 0x1p-23 * (2 * (1 + std::fabs(m.lse)) + p.cp + 2) + 0x1p-23 * m.lseSlack;
}

namespace {

// Which output elements of each rank hold a merge (1): the rest must stay
// poisoned. Bytes, not bits: threads write their rows' elements at once.
struct Written {
  std::vector<std::vector<uint8_t>> out, lse;
};

// The verdicts of rows [first, second): bad elements counted, the first five
// described.
struct Part {
  size_t bad = 0, checked = 0;
  std::vector<std::string> notes;
  void note(const std::string& what) {
    if (bad++ < 5) notes.push_back(what);
  }
};

void checkRows(const Problem& p, const std::vector<Output>& got, const CheckOptions& o, const std::vector<int>& start,
               std::pair<int, int> rows, Written* written, Part* part) {
  auto note = [part](const std::string& what) { part->note(what); };
  const int D = p.headDim, H = p.cp * p.localHeads;
  const bool fp8 = p.wire == Wire::Fp8;
  const Layout& s = p.layout;
  for (int b = rows.first; b < rows.second; b++)
    for (int h = 0; h < H; h++) {
      Merge m;
      bool merged = false;
      for (int r = 0; r < p.cp; r++) {
        int row, head;
        if (!got[r].out || !place(p, start, r, b, h, &row, &head)) continue;
        if (!merged || (fp8 && m.receiver != r)) {  // NONE on the fp8 wire: each rank's own share is exact
          m = merge(p, b, h, r, o.rule);
          merged = true;
        }
        auto where = [&](const char* what, int d) {
          std::ostringstream w;
          w << "rank " << r << " (row " << b << ", head " << h << ") " << what << "[" << row << "][" << head << "]";
          if (d >= 0) w << "[" << d << "]";
          return w.str();
        };
        for (int d = 0; d < D; d++) {
          const int64_t i = row * s.outRow + head * s.outHead + d;
          if (i < 0 || (size_t)i >= got[r].outElements) {
            note(where("out", d) + " lies outside the rank's out buffer (a test bug)");
            continue;
          }
          written->out[r][i] = 1;
          part->checked++;
          const double g = decode(p.dtype, got[r].out, i);
          const bool model = fp8 && o.fp8Model;
          const double ref = model ? m.fp8[d] : m.out[d];
          double tol = 0;
          bool ok;
          if (m.empty) {
            ok = g == 0.0;
          } else if (std::isnan(ref)) {
            ok = fp8 ? !finite(g) : std::isnan(g);
          } else if (!finite(ref)) {
            ok = fp8 ? !finite(g) : g == ref;
          } else {
            tol = model ? nativeBound(p, ref, m.mag[d] * (1 + 0x1p-4) + m.fp8Err[d], m.magD[d] * (1 + 0x1p-4))
                        : outTolerance(p, m, d);
            ok = finite(g) && std::fabs(g - ref) <= tol;
          }
          if (!ok) {
            std::ostringstream w;
            w << where("out", d) << " = " << g << ", oracle " << ref;
            if (m.empty) w << " (empty on every rank: exactly 0)";
            else if (finite(ref)) w << " (tolerance " << tol << ", off by " << std::fabs(g - ref) << ")";
            note(w.str());
          }
        }
        if (!got[r].outLse) continue;
        const int64_t li = row * s.outLseRow + head * s.outLseHead;
        if (li < 0 || (size_t)li >= got[r].outLseElements) {
          note(where("outLse", -1) + " lies outside the rank's outLse buffer (a test bug)");
          continue;
        }
        written->lse[r][li] = 1;
        part->checked++;
        const double g = got[r].outLse[li];
        const bool ok = m.empty ? g == -kInf : finite(g) && std::fabs(g - m.lse) <= lseTolerance(p, m);
        if (!ok) {
          std::ostringstream w;
          w << where("outLse", -1) << " = " << g << ", oracle " << m.lse;
          if (!m.empty) w << " (tolerance " << lseTolerance(p, m) << ")";
          note(w.str());
        }
      }
    }
}

// Row blocks on threads once a call is large enough to pay for them (the
// GPU tests' checks are most of their time): verdicts in row order, as one
// thread would give them.
std::vector<Part> checkAllRows(const Problem& p, const std::vector<Output>& got, const CheckOptions& o,
                               Written* written) {
  constexpr double kWorkPerThread = 1 << 18;  // elements x sources
  const std::vector<int> start = rowStarts(p);
  const double work = (double)p.batch * p.cp * p.localHeads * p.headDim * p.cp;
  const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
  const int threads = (int)std::min<double>({(double)cores, std::max(1.0, work / kWorkPerThread), (double)p.batch});
  std::vector<Part> parts(std::max(threads, 1));
  if (threads <= 1) {
    checkRows(p, got, o, start, {0, p.batch}, written, &parts[0]);
    return parts;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) {
    const std::pair<int, int> rows = {(int)((int64_t)p.batch * t / threads), (int)((int64_t)p.batch * (t + 1) / threads)};
    pool.emplace_back([&, rows, t] { checkRows(p, got, o, start, rows, written, &parts[t]); });
  }
  for (std::thread& t : pool) t.join();
  return parts;
}

}  // namespace

Report check(const Problem& p, const std::vector<Output>& got, const CheckOptions& o) {
  Report rep;
  std::ostringstream first;
  int noted = 0;
  auto note = [&](const std::string& what) {
    rep.bad++;
    if (noted++ < 5) first << (noted > 1 ? "\n  " : "") << what;
  };
  const int e = elementSize(p.dtype);
  Written written;
  written.out.resize(p.cp);
  written.lse.resize(p.cp);
  for (int r = 0; r < p.cp; r++) {
    if (!got[r].out) continue;
    written.out[r].assign(got[r].outElements, 0);
    written.lse[r].assign(got[r].outLse ? got[r].outLseElements : 0, 0);
  }
  for (const Part& part : checkAllRows(p, got, o, &written)) {
    for (const std::string& what : part.notes) note(what);
    rep.bad += part.bad - part.notes.size();  // note() counted the described ones
    rep.checked += part.checked;
  }
  if (o.untouched) {
    for (int r = 0; r < p.cp; r++) {
      if (!got[r].out) continue;
      size_t touched = 0, at = 0;
      const uint8_t* out = (const uint8_t*)got[r].out;
      for (size_t i = 0; i < written.out[r].size(); i++) {
        if (written.out[r][i]) continue;
        for (int k = 0; k < e; k++)
          if (out[i * e + k] != 0xff) {
            if (touched++ == 0) at = i;
            break;
          }
      }
      const uint8_t* lse = (const uint8_t*)got[r].outLse;
      size_t lseTouched = 0, lseAt = 0;
      for (size_t i = 0; i < written.lse[r].size(); i++) {
        if (written.lse[r][i]) continue;
        for (int k = 0; k < 4; k++)
          if (lse[i * 4 + k] != 0xff) {
            if (lseTouched++ == 0) lseAt = i;
            break;
          }
      }
      if (touched)
        note("rank " + std::to_string(r) + ": " + std::to_string(touched) +
             " out element(s) it holds no merge for were written (first: element " + std::to_string(at) + ")");
      if (lseTouched)
        note("rank " + std::to_string(r) + ": " + std::to_string(lseTouched) +
             " outLse element(s) it holds no merge for were written (first: element " + std::to_string(lseAt) + ")");
      // note() counted each line once; count every element.
      rep.bad += (touched ? touched - 1 : 0) + (lseTouched ? lseTouched - 1 : 0);
    }
  }
  rep.first = first.str();
  return rep;
}

}  // namespace oracle
