/*************************************************************************
 * An fp64 oracle of the collective, for every test that checks outputs:
 * written from DESIGN §1 and the public header (include/nccl_dcp.h) alone.
 * It shares NO code with src/: it includes nothing of ours (not merge.h,
 * not codec.h, not reference.h, not validate.h), so a wrong formula,
 * LSE base, NaN rule, empty-row rule, even split, LSE decoding or fp8
 * scale rule in the library's shared headers -- which the CPU reference
 * (reference.cc) and the kernels both include, and so agree on -- shows
 * here as a mismatch. The tests compare the kernels with the reference
 * bit for bit (within a rounding) AND with this oracle.
 *
 * What it decides by itself:
 *   - element decoding: bf16, fp16 and fp32 bits to double (partials and
 *     partial LSEs, as stored: a bf16 LSE is what its 16 bits say);
 *   - sanitising: NaN and +inf LSEs read as -inf (an empty source);
 *   - weights: w_s = base^(l_s - m), m the largest LSE (0 if none),
 *     normalised by W = sum w_s; out = sum (w_s / W) x_s, 0 when W = 0;
 *     outLse = m + log_base W, -inf when W = 0; a source of weight 0 never
 *     contributes, whatever its payload holds;
 *   - empty rows: row b of rank s is empty (its LSEs read -inf) when it
 *     lies outside [qsl[0], qsl[numSeqs]) or in a sequence whose local
 *     length is <= 0 (negative lengths are empty, as 0);
 *   - TOKEN's split: the caller's counts, else the even one (the first
 *     B mod cp ranks one row more); where each merge lands: HEAD rank r
 *     heads [r Hl, r Hl + Hl) of every row, TOKEN rank r every head of its
 *     rows (out row b - start[r]), NONE every rank everything;
 *   - fp8 (e4m3) on the wire: its own round-to-nearest-even encoder and
 *     decoder and the unit's scale rule (e4m3::scale, ONE function: the
 *     rule may change), the model x' = fl32(e4m3(fl32(x * inverse)) * scale)
 *     for every remote source's unit (a rank's own share stays exact).
 *
 * Comparisons (check()) are bound-based, from the output dtype:
 *   native: |got - exact| <= u |exact| + (2 cp + 8) 2^-24 M + ...
 *           u = 2^-8 (bf16), 2^-11 (fp16), 2^-24 (fp32): one rounding of
 *           the output; M = sum |w_s x_s| / W: fp32 accumulation relative
 *           to the terms (cancelling terms make |exact| a poor scale);
 *   fp8:    the native bound plus, per remote source of weight w_s,
 *           w_s (2^-4 |x_s| + 2^-10 scale_s): e4m3 rounds a normal value
 *           by at most 2^-4 of itself, a subnormal one (below 2^-6 scale)
 *           by at most half its step 2^-9 scale -- never bitwise, so the
 *           scale rule can change without the GPU comparisons changing;
 *   outLse: -inf exactly where every source is empty, else within a few
 *           units of fp32 rounding of m + log W;
 *   non-finite: where the exact merge is NaN (a NaN element of a live
 *           source) the output must be NaN, an infinite one the same
 *           infinity (fp8: any non-finite: e4m3 has no infinity); never a
 *           non-finite output where the exact merge is finite.
 * Outside the elements a rank holds, its out and outLse bytes must still
 * be the tests' poison (0xff). A large call's rows are checked in blocks
 * on threads (most of a GPU test's time is this check); the verdict is the
 * one a single thread gives, the first mismatches in row order.
 *
 * A tolerance loose enough to pass a wrong base (e vs 2), a wrong NaN rule
 * or a lost fp8 scale is a defect: test/unit/test_oracle.cc shows each of
 * those rejected.
 ************************************************************************/
#ifndef NCCL_DCP_TEST_ORACLE_H_
#define NCCL_DCP_TEST_ORACLE_H_

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oracle {

enum class Mode { Head, Token, None };
enum class Base { Two, E };
enum class Wire { Native, Fp8 };

// Element strides of every tensor (the last dimension contiguous).
struct Layout {
  int64_t inRow, inPeer, inHead;
  int64_t lseRow, lsePeer, lseHead;
  int64_t outRow, outHead;
  int64_t outLseRow, outLseHead;
};

// One rank's inputs, as the call takes them (host memory).
struct Rank {
  const void* partialOut = nullptr;   // elements of Problem::dtype
  const void* partialLse = nullptr;   // elements of Problem::lseDtype
  const int* seqLens = nullptr;       // numSeqs local lengths (NULL: no empty-shard arrays)
  const int* queryStartLoc = nullptr; // numSeqs + 1 row offsets
};

struct Problem {
  int cp = 0, batch = 0, localHeads = 0, headDim = 0;
  ncclDataType_t dtype = ncclBfloat16;     // partials and out
  ncclDataType_t lseDtype = ncclFloat32;   // partial LSEs (outLse is fp32)
  Base base = Base::Two;
  Mode mode = Mode::Head;
  Wire wire = Wire::Native;
  Layout layout{};
  std::vector<int> rowCounts;  // TOKEN: rows of each rank; empty: the even split
  int numSeqs = 0;             // 0: no row is empty by the arrays
  std::vector<Rank> ranks;     // cp of them

  int heads() const { return mode == Mode::Head ? localHeads : cp * localHeads; }  // of an out row
};

// ---- The primitives (public: the unit tests check each on its own).

// Element i of an array of dtype (bf16, fp16 or fp32 bits) as a double.
double decode(ncclDataType_t dtype, const void* base, int64_t i);
// NaN and +inf carry no weight: -inf.
double sanitize(double lse);
// TOKEN's row starts: cp + 1 prefix sums of the counts (or the even split).
std::vector<int> rowStarts(const Problem& p);
// Row `row` of rank `rank`'s inputs is empty (see the header).
bool rowIsEmpty(const Problem& p, int rank, int row);
// Where rank r holds the merge of (row, global head): its out row and head,
// or false when it holds none.
bool place(const Problem& p, const std::vector<int>& start, int r, int row, int head, int* outRow, int* outHead);

namespace e4m3 {
constexpr float kMax = 448.f;   // largest finite e4m3
constexpr uint8_t kNaN = 0x7f;
// Round to nearest even, saturating to +-448; NaN and +-inf: kNaN.
uint8_t encode(float v);
// The value of a code (NaN for 0x7f, 0xff).
double decode(uint8_t q);
// THE unit scale rule (one function, so a change of rule is one edit):
// amax / 448 in fp32, 1 below an amax of 2^-100 (a unit of zeros, or one
// so small its inverse would overflow).
float scale(float amax);
// What a sender multiplies the elements by: 448 / amax in fp32 for the
// rule above (1 with it), 1 / scale for any other rule a test plants.
float inverse(float amax, float scale);
}  // namespace e4m3

// A unit scale rule (e4m3::scale, or another one a test plants).
using ScaleRule = float (*)(float amax);

// The merge of (row, global head) in fp64.
struct Merge {
  std::vector<double> out;      // headDim: the exact merge of the inputs
  std::vector<double> mag;      // sum over live sources of |w_s x_s| / W
  std::vector<double> magD;     // the same, each term times |l_s - m| ln(base) (fp32's error in the exponent)
  std::vector<double> fp8;      // wire Fp8: the fp8 model's merge (own e4m3, `rule`)
  std::vector<double> fp8Err;   // wire Fp8: sum over live remote sources of w_s (2^-4 |x_s| + 2^-10 scale_s) / W
  double lse = 0;               // m + log_base W, -inf when empty
  double lseSlack = 0;          // fp32 error terms of the weights (sum w_s |l_s - m| / W)
  bool empty = false;           // every source empty: out 0, lse -inf
  int receiver = -1;            // the rank whose own share stays exact on the fp8 wire (-1: none)
};
// As rank `receiver` merges it: on the fp8 wire every other source's unit
// crosses the link, its own share stays exact. HEAD's merge has one
// receiver, the head's owner; TOKEN's the row's; NONE's every rank, each
// with its own share exact (their fp8 outputs differ).
Merge merge(const Problem& p, int row, int head, int receiver, ScaleRule rule = e4m3::scale);
// HEAD: as the head's owner merges it; TOKEN and NONE: as a rank that holds
// no share of it would (every source on the wire).
Merge merge(const Problem& p, int row, int head, ScaleRule rule = e4m3::scale);

// Unit roundoff of an output dtype: 2^-8, 2^-11, 2^-24.
double roundoff(ncclDataType_t dtype);
// The bound on |out - m.out[d]| check() allows (native; fp8 adds m.fp8Err).
double outTolerance(const Problem& p, const Merge& m, int d);
double lseTolerance(const Problem& p, const Merge& m);

// One rank's outputs. out NULL: the rank is not checked; outLse NULL: not
// wanted (not checked). Sizes in elements, for the poison outside.
struct Output {
  const void* out = nullptr;
  const float* outLse = nullptr;
  size_t outElements = 0, outLseElements = 0;
};

struct CheckOptions {
  bool untouched = true;  // every byte outside the rank's elements still 0xff
  // wire Fp8: compare with the fp8 model's merge within the native bound
  // instead of with the exact merge within the fp8 bound (the unit tests:
  // a check of the library's CPU model, which must follow the same rule).
  bool fp8Model = false;
  ScaleRule rule = e4m3::scale;
};

struct Report {
  size_t bad = 0;       // elements wrong, plus bytes touched outside
  size_t checked = 0;   // elements compared
  std::string first;    // the first few, one per line
};

Report check(const Problem& p, const std::vector<Output>& got, const CheckOptions& o = {});

}  // namespace oracle

#endif  // NCCL_DCP_TEST_ORACLE_H_
