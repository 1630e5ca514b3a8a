/*************************************************************************
 * The perf binary's command line: nccl-tests' letters with nccl-tests'
 * meanings (its src/common.cu getopt_long table: -b -e -i in bytes) and
 * most of its defaults (-n 20 -w 1 -m 1 -G 0 -c 1 -a 1; -b -e -i -f -d -T
 * differ: docs/perf-binary.md), ours as long
 * options (rows: --min-rows --max-rows --step-rows); nccl-tests' options
 * that change nothing here accepted at their default values; --help and
 * --version.
 ************************************************************************/
#include <fcntl.h>
#include <getopt.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "enums.h"
#include "error.h"
#include "harness.h"
#include "nccl_dcp.h"
#include "team.h"
#include "validate.h"

namespace nccl_dcp {
namespace perf {

std::string versionString(int code) {
  char s[32];
  snprintf(s, sizeof(s), "%d.%d.%d", code / 10000, code % 10000 / 100, code % 100);
  return s;
}

std::string versionText(int dcpLoaded, int ncclLoaded) {
  std::ostringstream o;
  o << "dcp_a2a_lse_reduce_perf: nccl-dcp " << versionString(NCCL_DCP_VERSION_CODE) << " (library loaded: "
    << versionString(dcpLoaded) << "), NCCL headers " << versionString(NCCL_VERSION_CODE) << " (library loaded: "
    << versionString(ncclLoaded) << "), timeline "
#ifdef NCCL_DCP_TIMELINE
    << "built in"
#else
    << "not built (meson -Dtimeline=true)"
#endif
    << ", MPI launch " << (builtWithMpi() ? "yes" : "no (meson -Dmpi)") << "\n";
  return o.str();
}

std::string usage(const char* program) {
  std::ostringstream o;
  o << "USAGE: " << program << " [options]\n"
    << "       mpirun -np <processes> " << program << " [options]   (built with MPI: meson -Dmpi)\n"
    << "One call: ncclDcpA2aLseReduce of a batch of rows on every rank. The baseline (NCCL's all-to-all of\n"
    << "the partials + a combine kernel) and the floors of the hardware run in the same run, same data.\n"
    << "nccl-tests options (the same letters and meanings; defaults as nccl-tests' unless said):\n"
    << "  -t, --nthreads <n>        threads per process (default 1); ranks = processes x threads x GPUs\n"
    << "  -g, --ngpus <n>           GPUs per thread (default 1)\n"
    << "  -b, --minbytes <size>     smallest size, bytes of one rank's partials (B x cp x Hl x D x element)\n"
    << "                            (default 1 row; nccl-tests' -b/-e 32M, one size, is not ours)\n"
    << "  -e, --maxbytes <size>     largest size (default 1024 rows)\n"
    << "  -i, --stepbytes <size>    add this (> 0) between sizes instead of multiplying by -f (no default;\n"
    << "                            nccl-tests' 1M applies there only under its default -f 1)\n"
    << "                            A size is bytes: a plain number, or with a suffix K, M, G (K = 1024, as\n"
    << "                            nccl-tests; 1.5M, 32K). The sweep runs in whole rows: a size becomes\n"
    << "                            bytes / (ranks x Hl x D x element size) rows, rounded down, at least 1;\n"
    << "                            the table prints both. -b 32K -e 32M is 1..1024 rows at 2 ranks, Hl 16,\n"
    << "                            D 512, bf16. Without a size option: 1..1024 rows.\n"
    << "  -f, --stepfactor <x>      multiply the size by x > 1 between sizes (default 2, nccl-tests' 1; a real\n"
    << "                            number here, an integer there; given, it wins over -i; nccl-tests' -f 1,\n"
    << "                            steps of -i, is -i alone here)\n"
    << "  -n, --iters <n>           timed iterations per size (default 20)\n"
    << "  -w, --warmup_iters <n>    untimed iterations per size before them (default 1)\n"
    << "  -m, --agg_iters <n>       calls per iteration (default 1)\n"
    << "  -G, --cudagraph <n>       each iteration replays a CUDA graph of its -m calls n times (default 0:\n"
    << "                            eager calls)\n"
    << "                            time = the mean per call over the -n iterations, as nccl-tests reports\n"
    << "                            it (iteration time / (m x G)), but each iteration timed by CUDA events on\n"
    << "                            the GPU, not by the host's clock over all of them; the median iteration\n"
    << "                            is the column beside it. The baseline's -m calls are not grouped in one\n"
    << "                            ncclGroupStart/End (nccl-tests groups its -m calls). A decode step\n"
    << "                            replays a graph: -m 10 -G 1 measures that.\n"
    << "  -c, --check <n>           check n eager calls per size against the CPU reference, baselines too,\n"
    << "                            every input's sign flipped before each (no call reads the data of the\n"
    << "                            call before it); #wrong counts the wrong elements of all n (default 1;\n"
    << "                            0: none)\n"
    << "  -a, --average <0-3>       across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum (default 1)\n"
    << "  -d, --datatype <type>     bfloat16 | half | float (or bf16 | fp16 | fp32; default bfloat16,\n"
    << "                            nccl-tests' float)\n"
    << "  -C, --report_cputime <0|1>  1: the time columns are the host's time to issue one call (default 0)\n"
    << "  -T, --timeout <s>         a device-side wait gives up after s seconds, 0: never (sets\n"
    << "                            NCCL_DCP_TIMEOUT_MS; default: as the environment says, else 60 s;\n"
    << "                            nccl-tests' 0)\n"
    << "  -J, --output_file <file>  write the results as JSON (nccl-tests' fields, and ours beside them), to\n"
    << "                            any file name (overwritten); a path that cannot be written is refused\n"
    << "                            before the run\n"
    << "  -h, --help                this help\n"
    << "  -p, --parallel_init <0|1>   accepted; ranks are set up one thread each anyway\n"
    << "  at their default value, accepted and changing nothing: -z 0 -y 0 -N 1 -r 0 -S 0 -u 0 -M 0 -I 0\n"
    << "                            -K 0 -R 0 -x -1 -D 0 (other values are refused: they have no meaning here)\n"
    << "nccl-dcp options:\n"
    << "  --min-rows, --max-rows, --step-rows <rows>\n"
    << "                            the sweep in batch rows instead of bytes (as -b, -e, -i)\n"
    << "  -H, --local-heads <n>     local heads per rank, Hl (default 16)\n"
    << "  --head-dim <n>            head dim, D (default 512)\n"
    << "  -P, --protocol <p>        AUTO | LL | LL128 | SIMPLE (default AUTO; the table's last column and the\n"
    << "                            JSON's results[].protocol say what each size ran)\n"
    << "  -L, --lse-base <2|e>      base of the LSEs (default 2)\n"
    << "  --virtual-ranks <n>       loopback: n virtual ranks on one GPU, one thread, one process\n"
    << "                            (default 0: real ranks)\n"
    << "  --max-batch <rows>        workspace capacity in rows (default: the largest size); larger batches\n"
    << "                            run in chunks\n"
    << "  -B, --baseline <0-3>      baseline in the same run: 0 none, 1 ncclAlltoAll + combine, 2 the\n"
    << "                            partials' all-to-all alone, to compare with nccl-tests' alltoall_perf,\n"
    << "                            3 the fused call on the native wire (--wire fp8: speedup = native / fp8,\n"
    << "                            both timed in this process) (default 1)\n"
    << "  -F, --floors <0|1>        floors in the same run: peer-write kernel, copy engine, flag round trip\n"
    << "                            (default 1)\n"
    << "  --timeline                the fused kernel's in-kernel timeline per size, one call, per rank\n"
    << "                            (a build with meson -Dtimeline=true; this one: "
#ifdef NCCL_DCP_TIMELINE
    << "yes)\n"
#else
    << "no)\n"
#endif
    << "  --wire native|fp8         what crosses the link (the config's wire): native (default) or fp8\n"
    << "                            (e4m3 + a scale per (row, head); HEAD, bf16 / fp16; -c checks the fp8\n"
    << "                            model; the baselines stay native)\n"
    << "  --scatter <mode>          the scatter mode (the config's scatter), with its own baselines:\n"
    << "                            head:  rank r gets heads r*Hl.. of every row; baseline ncclAlltoAll +\n"
    << "                                   combine (default)\n"
    << "                            token: rank r gets every head of its rows (even split); baseline\n"
    << "                                   ncclAlltoAll of the rows in token layout (blocks of ceil(B/cp)\n"
    << "                                   rows) + combine of its rows\n"
    << "                            none:  every rank gets everything; baseline ncclAllGather of every\n"
    << "                                   partial + combine of every row, and baseline 2: the head call +\n"
    << "                                   ncclAllGather of the merged heads (rank-major, no transpose);\n"
    << "                                   on loopback that all-gather is one copy kernel writing straight\n"
    << "                                   into every rank's output, which real ranks cannot do with\n"
    << "                                   unregistered buffers (NCCL stages them)\n"
    << "  --staged-gather <0|1>     loopback NONE: 1 stages baseline 2's all-gather as NCCL does for\n"
    << "                            unregistered buffers (each rank's merged heads copied into a staging\n"
    << "                            buffer, then from it into every output: twice the copies; default 0)\n"
    << "  --registered-out <0|1>    NONE: 1 registers every rank's out and outLse (ncclDcpOutputRegister;\n"
    << "                            loopback: its form of it), so phase 2 of the two phases writes the\n"
    << "                            peers' outputs directly (SIMPLE rounds); real ranks: outputs from\n"
    << "                            ncclMemAlloc; default 0\n"
    << "                            The size columns stay the partials each rank holds, in every mode.\n"
    << "  --provider <p>            the fused path's workspace: auto | nccl-window | cuda-ipc | fallback\n"
    << "                            (sets NCCL_DCP_PROVIDER; default: as the environment says, else auto)\n"
    << "  --version                 the versions of nccl-dcp and NCCL, then exit\n"
    << "Refused: -o (the reduction is always the LSE-weighted merge), -V (nccl-tests' device CTA count;\n"
    << "virtual ranks are --virtual-ranks).\n"
    << "Bad arguments, and sizes or a config the library refuses, are refused before any GPU is touched.\n"
    << "Exit codes: 0 ok, 2 bad arguments, 3 no GPU, 4 wrong results, 5 a call failed (nccl-tests' codes\n"
    << "differ: 255 bad sizes, 2 CUDA, 3 NCCL, 4 timeout, 5 too few GPUs, 7 wrong results).\n"
    << "Not read: NCCL_TESTS_MIN_BW, NCCL_TESTS_DEVICE, NCCL_TESTS_SPLIT, NCCL_TESTS_SPLIT_MASK.\n";
  return o.str();
}

namespace {

bool toInt(const char* s, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Long-only options: getopt_long's codes past every character.
enum LongOnly {
  kOptMinRows = 256,
  kOptMaxRows,
  kOptStepRows,
  kOptHeadDim,
  kOptVirtualRanks,
  kOptMaxBatch,
  kOptTimeline,
  kOptProvider,
  kOptVersion,
  kOptScatter,
  kOptWire,
  kOptStagedGather,
  kOptRegisteredOut,
};

const struct option kLongOptions[] = {
    // nccl-tests' names
    {"nthreads", required_argument, nullptr, 't'},
    {"ngpus", required_argument, nullptr, 'g'},
    {"minbytes", required_argument, nullptr, 'b'},
    {"maxbytes", required_argument, nullptr, 'e'},
    {"stepbytes", required_argument, nullptr, 'i'},
    {"stepfactor", required_argument, nullptr, 'f'},
    {"iters", required_argument, nullptr, 'n'},
    {"agg_iters", required_argument, nullptr, 'm'},
    {"warmup_iters", required_argument, nullptr, 'w'},
    {"run_cycles", required_argument, nullptr, 'N'},
    {"parallel_init", required_argument, nullptr, 'p'},
    {"check", required_argument, nullptr, 'c'},
    {"op", required_argument, nullptr, 'o'},
    {"datatype", required_argument, nullptr, 'd'},
    {"root", required_argument, nullptr, 'r'},
    {"blocking", required_argument, nullptr, 'z'},
    {"stream_null", required_argument, nullptr, 'y'},
    {"timeout", required_argument, nullptr, 'T'},
    {"cudagraph", required_argument, nullptr, 'G'},
    {"report_cputime", required_argument, nullptr, 'C'},
    {"report_timestamps", required_argument, nullptr, 'S'},
    {"output_file", required_argument, nullptr, 'J'},
    {"average", required_argument, nullptr, 'a'},
    {"local_register", required_argument, nullptr, 'R'},
    {"cta_policy", required_argument, nullptr, 'x'},
    {"device_implementation", required_argument, nullptr, 'D'},
    {"device_cta_count", required_argument, nullptr, 'V'},
    {"memory", required_argument, nullptr, 'M'},
    {"unalign", required_argument, nullptr, 'u'},
    {"per_iter_timing", required_argument, nullptr, 'I'},
    {"per_iter_skip", required_argument, nullptr, 'K'},
    {"help", no_argument, nullptr, 'h'},
    // ours
    {"min-rows", required_argument, nullptr, kOptMinRows},
    {"max-rows", required_argument, nullptr, kOptMaxRows},
    {"step-rows", required_argument, nullptr, kOptStepRows},
    {"local-heads", required_argument, nullptr, 'H'},
    {"head-dim", required_argument, nullptr, kOptHeadDim},
    {"protocol", required_argument, nullptr, 'P'},
    {"lse-base", required_argument, nullptr, 'L'},
    {"virtual-ranks", required_argument, nullptr, kOptVirtualRanks},
    {"max-batch", required_argument, nullptr, kOptMaxBatch},
    {"baseline", required_argument, nullptr, 'B'},
    {"floors", required_argument, nullptr, 'F'},
    {"timeline", no_argument, nullptr, kOptTimeline},
    {"provider", required_argument, nullptr, kOptProvider},
    {"scatter", required_argument, nullptr, kOptScatter},
    {"wire", required_argument, nullptr, kOptWire},
    {"staged-gather", required_argument, nullptr, kOptStagedGather},
    {"registered-out", required_argument, nullptr, kOptRegisteredOut},
    {"version", no_argument, nullptr, kOptVersion},
    {nullptr, 0, nullptr, 0},
};
// ':' first: a missing value comes back as ':', an unknown option as '?'.
// Every nccl-tests letter is known, so that the messages can say what it
// means there.
const char kShortOptions[] = ":t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:S:J:a:R:x:D:V:M:u:I:K:hH:P:L:B:F:";

// How the messages name an option: "-n/--iters" or "--head-dim".
std::string optionName(int code) {
  std::string name = code < 256 ? std::string("-") + (char)code : "";
  for (const struct option* o = kLongOptions; o->name; o++)
    if (o->val == code) return name + (name.empty() ? "--" : "/--") + o->name;
  return name.empty() ? "?" : name;
}

// What getopt_long's '?' was about: a long option that is no option's
// name or prefix, a prefix of several (getopt_long takes a unique prefix),
// a value given to an option that takes none (--help=1), or an unknown
// letter. `given` is the argument it stopped at, `code` its optopt.
std::string unknownOption(const std::string& given, int code) {
  const bool isLong = given.size() > 2 && given.compare(0, 2, "--") == 0;
  if (isLong) {
    const size_t eq = given.find('=');
    const std::string name = given.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::vector<const struct option*> matches;
    for (const struct option* o = kLongOptions; o->name; o++) {
      if (o->name == name) {
        matches.assign(1, o);
        break;
      }
      if (!name.empty() && strncmp(o->name, name.c_str(), name.size()) == 0) matches.push_back(o);
    }
    if (matches.size() == 1 && matches[0]->has_arg == no_argument && eq != std::string::npos)
      return "option --" + std::string(matches[0]->name) + " takes no value ('" + given + "')";
    if (matches.size() > 1) {
      std::string names;
      for (const struct option* o : matches) names += (names.empty() ? "--" : ", --") + std::string(o->name);
      return "option '" + given + "' is ambiguous: it begins " + names;
    }
    if (code == 0 || matches.empty()) return "unknown option '" + given + "'";
  }
  if (code > 0 && code < 256) return std::string("unknown option -") + (char)code;
  return "unknown option '" + given + "'";
}

// nccl-tests' options whose default is what this binary always does: that
// value is accepted and changes nothing (scripts written for nccl-tests
// pass them); any other is refused with what the option means there.
struct NcclTestsDefault {
  int code;
  const char* accepted;  // the value that changes nothing; nullptr: none
  const char* meaning;   // what it is in nccl-tests, and what to use here
};

const NcclTestsDefault kNcclTestsDefaults[] = {
    {'N', "1", "--run_cycles: this binary runs the sweep once"},
    {'o', nullptr, "--op: the reduction here is always the LSE-weighted merge"},
    {'r', "0", "--root: an all-to-all has none"},
    {'z', "0", "--blocking: the calls here never block the host"},
    {'y', "0", "--stream_null: the calls run on a stream of their own"},
    {'S', "0", "--report_timestamps"},
    {'R', "0", "--local_register: the workspace is --provider's"},
    {'x', "-1", "--cta_policy"},
    {'D', "0", "--device_implementation (the head dim is --head-dim)"},
    {'V', nullptr, "--device_cta_count (virtual ranks are --virtual-ranks)"},
    {'M', "0", "--memory"},
    {'u', "0", "--unalign: the API needs 16-byte aligned rows"},
    {'I', "0", "--per_iter_timing: the median column is there anyway"},
    {'K', "0", "--per_iter_skip"},
};

// true when c is one of kNcclTestsDefaults: *error set unless v is its default.
bool ncclTestsDefault(int c, const char* v, std::string* error, bool* ok) {
  for (const NcclTestsDefault& d : kNcclTestsDefaults) {
    if (d.code != c) continue;
    *ok = d.accepted && !strcmp(v, d.accepted);
    if (!*ok)
      *error = std::string("option -") + (char)c + " " + v + " is nccl-tests' " + d.meaning + "; " +
               (d.accepted ? std::string("only its default, -") + (char)c + " " + d.accepted + ", is accepted here"
                           : "this binary does not have it");
    return true;
  }
  return false;
}

// The integer options: range and where the value goes.
struct IntOption {
  int code;
  int64_t lo, hi;
  void (*set)(Args*, int64_t);
};

const IntOption kIntOptions[] = {
    {'g', 1, 64, [](Args* a, int64_t v) { a->gpusPerThread = (int)v; }},
    {'t', 1, 64, [](Args* a, int64_t v) { a->threads = (int)v; }},
    {'n', 1, 1000000, [](Args* a, int64_t v) { a->iters = (int)v; }},
    {'w', 0, 1000000, [](Args* a, int64_t v) { a->warmup = (int)v; }},
    {'m', 1, 10000, [](Args* a, int64_t v) { a->aggIters = (int)v; }},
    {'G', 0, 10000, [](Args* a, int64_t v) { a->graphLaunches = (int)v; }},
    {'c', 0, 1000, [](Args* a, int64_t v) { a->check = (int)v; }},
    {'a', 0, 3, [](Args* a, int64_t v) { a->aggregate = (int)v; }},
    {'C', 0, 1, [](Args* a, int64_t v) { a->cpuTime = (int)v; }},
    {'p', 0, 1, [](Args* a, int64_t v) { a->parallelInit = (int)v; }},
    {'T', 0, 86400, [](Args* a, int64_t v) { a->timeoutS = (int)v; }},
    {'H', 1, NCCL_DCP_MAX_LOCAL_HEADS, [](Args* a, int64_t v) { a->localHeads = (int)v; }},
    {kOptHeadDim, 1, NCCL_DCP_MAX_HEAD_DIM, [](Args* a, int64_t v) { a->headDim = (int)v; }},
    {kOptVirtualRanks, 0, 16, [](Args* a, int64_t v) { a->virtualRanks = (int)v; }},
    {kOptMaxBatch, 0, NCCL_DCP_MAX_BATCH_CAPACITY, [](Args* a, int64_t v) { a->maxBatch = (int)v; }},
    {'B', 0, 3, [](Args* a, int64_t v) { a->baseline = (int)v; }},
    {'F', 0, 1, [](Args* a, int64_t v) { a->floors = (int)v; }},
    {kOptStagedGather, 0, 1, [](Args* a, int64_t v) { a->stagedGather = (int)v; }},
    {kOptRegisteredOut, 0, 1, [](Args* a, int64_t v) { a->registeredOut = (int)v; }},
};

constexpr int64_t kMaxSweepRows = NCCL_DCP_MAX_BATCH_CAPACITY * 64LL;
constexpr int64_t kMaxSizeBytes = 1LL << 44;

// The options whose value is a word or a size: false (with *error) when it
// is none of the accepted ones.
bool parseWordOption(int code, const char* v, Args* a, std::string* error) {
  auto bad = [&](const char* accepted) {
    *error = "option " + optionName(code) + ": '" + v + "' is not " + accepted;
    return false;
  };
  switch (code) {
    case 'b':
    case 'e':
    case 'i': {
      Size z{0, true};
      if (!parseBytes(v, &z.value)) return bad("a size in bytes (4096, 32K, 1.5M, 1G)");
      if (z.value > kMaxSizeBytes) return bad(("at most " + std::to_string(kMaxSizeBytes) + " bytes").c_str());
      (code == 'b' ? a->minSize : code == 'e' ? a->maxSize : a->stepSize) = z;
      return true;
    }
    case kOptMinRows:
    case kOptMaxRows:
    case kOptStepRows: {
      const int64_t hi = code == kOptStepRows ? NCCL_DCP_MAX_BATCH_CAPACITY : kMaxSweepRows;
      Size z{0, false};
      if (!toInt(v, code == kOptStepRows ? 1 : 0, hi, &z.value))
        return bad(("a whole number of rows in [" + std::to_string(code == kOptStepRows ? 1 : 0) + ", " +
                    std::to_string(hi) + "]").c_str());
      (code == kOptMinRows ? a->minSize : code == kOptMaxRows ? a->maxSize : a->stepSize) = z;
      return true;
    }
    case 'f': {
      char* end = nullptr;
      a->factor = strtod(v, &end);
      if (end == v || *end != '\0' || !(a->factor > 1.0) || !std::isfinite(a->factor)) return bad("a factor > 1");
      a->factorGiven = true;
      return true;
    }
    case 'd':
      if (!parseDtype(v, &a->dtype)) return bad("bfloat16, half or float (bf16, fp16, fp32)");
      return true;
    case 'P':
      if (!parseProtocol(v, &a->protocol)) return bad("AUTO, LL, LL128 or SIMPLE");
      return true;
    case 'L':
      if (!strcmp(v, "2")) a->lseBase = ncclDcpLseBase2;
      else if (!strcasecmp(v, "e")) a->lseBase = ncclDcpLseBaseE;
      else return bad("2 or e");
      return true;
    case 'J':
      if (!*v) return bad("a file name");
      a->json = v;
      return true;
    case kOptScatter:
      if (!parseScatter(v, &a->scatter)) return bad("head, token or none");
      return true;
    case kOptWire:
      if (!parseWire(v, &a->wire)) return bad("native or fp8");
      return true;
    case kOptProvider: {
      int p = 0;
      if (!parseProvider(v, &p)) return bad("auto, nccl-window, cuda-ipc or fallback");
      a->provider = v;
      return true;
    }
    default:
      *error = "unknown option " + optionName(code);
      return false;
  }
}

// Rows of a size flag in rows; false when it is in bytes (known later).
bool rowsOf(const Size& z, int64_t* rows) {
  if (z.bytes) return false;
  *rows = z.value;
  return true;
}

// How the messages name a size option: by the unit it was given in.
const char* sizeFlag(const Size& z, char letter) {
  if (letter == 'b') return z.bytes ? "-b" : "--min-rows";
  if (letter == 'e') return z.bytes ? "-e" : "--max-rows";
  return z.bytes ? "-i" : "--step-rows";
}

// Combinations no single option can judge (sizes in two units are judged
// once the rank count is known: resolveSizes).
bool checkCombination(const Args& a, std::string* error) {
  if (a.minSize.bytes == a.maxSize.bytes && a.minSize.value > a.maxSize.value) {
    const char* unit = a.minSize.bytes ? " B" : " rows";
    *error = std::string(sizeFlag(a.minSize, 'b')) + " " + std::to_string(a.minSize.value) + unit +
             " is larger than " + sizeFlag(a.maxSize, 'e') + " " + std::to_string(a.maxSize.value) + unit;
    return false;
  }
  // nccl-tests adds -i while its factor is 1 (no -f): a step of 0 would
  // never reach -e there; here it used to fall back to -f 2 unsaid.
  if (a.stepSize.bytes && a.stepSize.value == 0 && !a.factorGiven) {
    *error = "-i 0: a step of 0 bytes never reaches -e (nccl-tests would loop for ever): give -i > 0, or -f";
    return false;
  }
  if (a.baseline == kBaselineNativeWire && a.wire != ncclDcpWireFp8E4m3) {
    *error = "-B 3 times the fused call on the native wire beside the config's: it needs --wire fp8";
    return false;
  }
  if (a.stagedGather && (a.virtualRanks == 0 || a.scatter != ncclDcpScatterNone || a.baseline != kBaselineFull)) {
    *error = "--staged-gather 1 stages loopback NONE's baseline 2: it needs --virtual-ranks, --scatter none and -B 1 "
             "(on real ranks ncclAllGather stages by itself)";
    return false;
  }
  if (a.registeredOut && a.scatter != ncclDcpScatterNone) {
    *error = "--registered-out 1 registers the outputs NONE's phase 2 writes directly: it needs --scatter none";
    return false;
  }
  if (a.virtualRanks > 0 && (a.threads > 1 || a.gpusPerThread > 1)) {
    *error = "--virtual-ranks " + std::to_string(a.virtualRanks) +
             " runs every virtual rank on one GPU from one thread: drop -t and -g (or drop --virtual-ranks for "
             "real ranks)";
    return false;
  }
  return true;
}

}  // namespace

bool parseBytes(const char* text, int64_t* bytes) {
  const char* s = text;
  if (!*s || *s == '-' || *s == '+' || *s == ' ') return false;
  char* end = nullptr;
  const double v = strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return false;
  // Only decimal digits, a point and the suffix: no hex, no exponent.
  for (const char* c = s; c < end; c++)
    if (!isdigit((unsigned char)*c) && *c != '.') return false;
  std::string suffix(end);
  for (char& ch : suffix) ch = (char)toupper((unsigned char)ch);
  double unit = 0;
  if (suffix.empty() || suffix == "B") unit = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") unit = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") unit = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") unit = 1024.0 * 1024 * 1024;
  else return false;
  const double b = v * unit;
  if (b > 9e15 || b != std::floor(b)) return false;  // whole bytes: 1.5 is not a size, 1.5K is
  *bytes = (int64_t)b;
  return true;
}

int64_t bytesPerRow(const Args& a, int nRanks) {
  const int64_t elt = a.dtype == ncclFloat32 ? 4 : 2;
  return (int64_t)std::max(nRanks, 1) * a.localHeads * a.headDim * elt;
}

namespace {

// Rows of a size: rows as given, bytes rounded down to whole rows, at
// least one for a non-zero size.
int64_t rowsOfSize(const Size& z, int64_t perRow) {
  if (!z.bytes) return z.value;
  return z.value == 0 ? 0 : std::max<int64_t>(z.value / perRow, 1);
}

}  // namespace

bool resolveSizes(Args* a, int nRanks, std::string* error) {
  const int64_t perRow = bytesPerRow(*a, nRanks);
  a->minRows = rowsOfSize(a->minSize, perRow);
  a->maxRows = rowsOfSize(a->maxSize, perRow);
  a->step = rowsOfSize(a->stepSize, perRow);
  const std::string unit = " rows (one row = " + std::to_string(perRow) + " B at " + std::to_string(nRanks) +
                           " ranks)";
  if (a->minRows > a->maxRows) {
    // A bound left at its default is named as such: nccl-tests' are 32M.
    const Args defaults;
    const bool minDefault = !a->minSize.bytes && a->minSize.value == defaults.minSize.value;
    const bool maxDefault = !a->maxSize.bytes && a->maxSize.value == defaults.maxSize.value;
    *error = std::string(sizeFlag(a->minSize, 'b')) + " is " + std::to_string(a->minRows) + " rows, more than " +
             sizeFlag(a->maxSize, 'e') + "'s " + std::to_string(a->maxRows) + unit +
             (minDefault ? "; without -b / --min-rows the sweep starts at 1 row" : "") +
             (maxDefault ? "; without -e / --max-rows it ends at 1024 rows (nccl-tests' -b/-e default, 32M, is "
                           "not ours: give -e too)"
                         : "");
    return false;
  }
  if (a->maxRows > kMaxSweepRows) {
    *error = std::string(sizeFlag(a->maxSize, 'e')) + " is " + std::to_string(a->maxRows) + unit + ": at most " +
             std::to_string(kMaxSweepRows);
    return false;
  }
  if (a->step > NCCL_DCP_MAX_BATCH_CAPACITY) {
    *error = std::string(sizeFlag(a->stepSize, 'i')) + " is " + std::to_string(a->step) + unit + ": at most " +
             std::to_string(NCCL_DCP_MAX_BATCH_CAPACITY);
    return false;
  }
  return true;
}

std::string sizeNote(const Args& a, int nRanks) {
  if (!a.minSize.bytes && !a.maxSize.bytes && !a.stepSize.bytes) return "";
  const int64_t perRow = bytesPerRow(a, nRanks);
  std::ostringstream o;
  o << "# sizes in bytes -> rows: one row = " << nRanks << " ranks x Hl " << a.localHeads << " x D " << a.headDim
    << " x " << (a.dtype == ncclFloat32 ? 4 : 2) << " B = " << perRow << " B:";
  const std::pair<const char*, std::pair<Size, int64_t>> sizes[] = {
      {"-b", {a.minSize, a.minRows}}, {"-e", {a.maxSize, a.maxRows}}, {"-i", {a.stepSize, a.step}}};
  bool below = false;
  for (const auto& [flag, z] : sizes)
    if (z.first.bytes) {
      const bool lessThanARow = z.first.value > 0 && z.first.value < perRow;
      below = below || lessThanARow;
      o << " " << flag << " " << z.first.value << " B = " << z.second << " rows" << (lessThanARow ? " (less than one row)" : "")
        << ";";
    }
  std::string s = o.str();
  s.back() = '\n';
  // A plain number is bytes, as in nccl-tests; a sweep meant in rows says so.
  if (below) s += "# (sizes are bytes, as in nccl-tests: a sweep in rows is --min-rows / --max-rows)\n";
  return s;
}

int ranksBeforeGpu(const Args& a, int processes) {
  return a.virtualRanks > 0 ? a.virtualRanks : std::max(processes, 1) * a.threads * a.gpusPerThread;
}

namespace {

// The config fields the flags set, the option behind each and its value
// as given (for the message of a config the library refuses).
struct ConfigOption {
  const char* field;
  const char* option;
  std::string (*value)(const Args&);
};

const ConfigOption kConfigOptions[] = {
    {"headDim", "--head-dim", [](const Args& a) { return std::to_string(a.headDim); }},
    {"localHeads", "-H/--local-heads", [](const Args& a) { return std::to_string(a.localHeads); }},
    {"dtype", "-d", [](const Args& a) { return std::string(dtypeName(a.dtype)); }},
    {"maxBatch", "--max-batch", [](const Args& a) { return std::to_string(capacityOf(a)); }},
    {"protocol", "-P", [](const Args& a) { return std::string(protocolName(a.protocol)); }},
    {"wire", "--wire", [](const Args& a) { return std::string(wireName(a.wire)); }},
    {"scatter", "--scatter", [](const Args& a) { return std::string(scatterName(a.scatter)); }},
    {"lseBase", "-L", [](const Args& a) { return std::string(a.lseBase ? "e" : "2"); }},
};

// True when `word` occurs in `text` as a whole identifier.
bool mentions(const std::string& text, const char* word) {
  const size_t n = strlen(word);
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool before = at == 0 || !isalnum((unsigned char)text[at - 1]);
    const bool after = at + n == text.size() || !isalnum((unsigned char)text[at + n]);
    if (before && after) return true;
  }
  return false;
}

}  // namespace

bool checkConfig(const Args& a, std::string* error) {
  const ncclDcpConfig_t c = configOf(a);
  Config cfg;
  if (resolveConfig(&c, Env(), &cfg) == ncclSuccess) return true;
  const std::string why = lastError();
  std::string options;
  for (const ConfigOption& o : kConfigOptions)
    if (mentions(why, o.field)) options += (options.empty() ? "" : " with ") + std::string(o.option) + " " + o.value(a);
  if (options.empty()) options = "the options";
  *error = options + ": not a config the library takes (" + why + ")";
  return false;
}

bool probeOutputFile(const std::string& path, std::string* error) {
  // A new file: created, then removed (the run writes it at its end).
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
    return true;
  }
  // An existing one: opened for writing (O_NONBLOCK: a FIFO with no reader
  // yet answers ENXIO instead of blocking), then, a plain file, removed:
  // an earlier run's JSON left there would read as this run's when this
  // one ends before writing its own (no GPU, a failed call). A link, a
  // FIFO or a device (/dev/stdout) is left as it is.
  if (errno == EEXIST) {
    fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 || errno == ENXIO) {
      if (fd >= 0) close(fd);
      struct stat st;
      if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || unlink(path.c_str()) == 0) return true;
      *error = "option -J/--output_file: cannot remove the earlier '" + path + "': " + strerror(errno);
      return false;
    }
  }
  *error = "option -J/--output_file: cannot write '" + path + "': " + strerror(errno);
  return false;
}

bool checkBeforeGpu(Args* a, int nRanks, bool probeJson, std::string* error) {
  if (!resolveSizes(a, nRanks, error)) return false;
  if (!checkConfig(*a, error)) return false;
  return !probeJson || a->json.empty() || probeOutputFile(a->json, error);
}

ParseResult parseArgs(int argc, char** argv, Args* a, std::string* error) {
  a->argv.assign(argv, argv + argc);  // before getopt_long permutes argv
  optind = 0;                         // GNU: start over (the tests parse many times)
  opterr = 0;                         // our messages, not getopt's
  for (;;) {
    const int c = getopt_long(argc, argv, kShortOptions, kLongOptions, nullptr);
    if (c == -1) break;
    const std::string given = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (c == '?') {
      *error = unknownOption(given, optopt);
      return ParseResult::Error;
    }
    if (c == ':') {
      *error = "option " + (optopt > 0 ? optionName(optopt) : given) + " needs a value";
      return ParseResult::Error;
    }
    if (c == 'h') return ParseResult::Help;
    if (c == kOptVersion) return ParseResult::Version;
    bool accepted = false;
    if (ncclTestsDefault(c, optarg, error, &accepted)) {
      if (!accepted) return ParseResult::Error;
      continue;
    }
    if (c == kOptTimeline) {
#ifdef NCCL_DCP_TIMELINE
      a->timeline = 1;
      continue;
#else
      *error = "--timeline needs a build with the in-kernel timeline (meson setup -Dtimeline=true); this binary "
               "has none";
      return ParseResult::Error;
#endif
    }
    const IntOption* io = nullptr;
    for (const IntOption& o : kIntOptions)
      if (o.code == c) io = &o;
    if (!io) {
      if (!parseWordOption(c, optarg, a, error)) return ParseResult::Error;
      continue;
    }
    int64_t n = 0;
    if (!toInt(optarg, io->lo, io->hi, &n)) {
      *error = "option " + optionName(c) + ": '" + optarg + "' is not an integer in [" + std::to_string(io->lo) +
               ", " + std::to_string(io->hi) + "]";
      return ParseResult::Error;
    }
    io->set(a, n);
  }
  if (optind < argc) {
    *error = "unexpected argument '" + std::string(argv[optind]) + "' (options only)";
    return ParseResult::Error;
  }
  rowsOf(a->minSize, &a->minRows);
  rowsOf(a->maxSize, &a->maxRows);
  rowsOf(a->stepSize, &a->step);
  return checkCombination(*a, error) ? ParseResult::Ok : ParseResult::Error;
}

}  // namespace perf
}  // namespace nccl_dcp
