/*************************************************************************
 * The perf binary's command line: nccl-tests' letters with nccl-tests'
 * meanings (its src/common.cu getopt_long table), ours as long options;
 * sizes in rows or bytes; --help and --version.
 ************************************************************************/
#include <getopt.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "enums.h"
#include "harness.h"
#include "nccl_dcp.h"
#include "team.h"

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
    << "nccl-tests options (the same letters mean the same things):\n"
    << "  -t, --nthreads <n>        threads per process (default 1); ranks = processes x threads x GPUs\n"
    << "  -g, --ngpus <n>           GPUs per thread (default 1)\n"
    << "  -b <size>                 smallest batch (default 1 row)\n"
    << "  -e <size>                 largest batch (default 1024 rows)\n"
    << "  -i <size>                 add this between sizes instead of multiplying by -f (default 0: -f)\n"
    << "                            A size is batch rows as a plain number, or bytes of one rank's partials\n"
    << "                            with a suffix: B, K, M, G (K = 1024, as nccl-tests): rows = bytes /\n"
    << "                            (ranks x Hl x D x element size), rounded down, at least 1. -b 32K -e 32M\n"
    << "                            is 1..1024 rows at 2 ranks, Hl 16, D 512, bf16. The table shows both.\n"
    << "  --minbytes, --maxbytes, --stepbytes <bytes>\n"
    << "                            -b, -e, -i in bytes, nccl-tests' long names (a plain number is bytes)\n"
    << "  -f, --stepfactor <x>      multiply the batch by x between sizes (default 2)\n"
    << "  -n, --iters <n>           timed samples per size (default 20); the median sample is reported\n"
    << "  -w, --warmup_iters <n>    untimed samples per size before them (default 5)\n"
    << "  -m, --agg_iters <n>       calls per sample (default 10)\n"
    << "  -G, --cudagraph <n>       launches of a CUDA graph per sample (default 1); 0: eager calls, no graph\n"
    << "                            nccl-tests captures -n x -m calls in one graph, launches it -G times and\n"
    << "                            reports the mean. Here each sample is -G launches of a graph of -m calls\n"
    << "                            (-G 0: -m eager calls) between two CUDA events, and a call's time is the\n"
    << "                            median sample / (m x G). The default, -m 10 -G 1, replays a graph of 10\n"
    << "                            calls as a decode step does.\n"
    << "  -c, --check <n>           check n calls per size against the CPU reference (default 1; 0: none)\n"
    << "  -a, --average <0-3>       across ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum (default 1)\n"
    << "  -d, --datatype <type>     bfloat16 | half | float (or bf16 | fp16 | fp32; default bfloat16)\n"
    << "  -T, --timeout <s>         a device-side wait gives up after s seconds, 0: never (sets\n"
    << "                            NCCL_DCP_TIMEOUT_MS; default: as the environment says, else 60 s)\n"
    << "  -J, --output_file <file>  write the results as JSON (nccl-tests' fields, and ours beside them)\n"
    << "  -h, --help                this help\n"
    << "nccl-dcp options:\n"
    << "  -H, --local-heads <n>     local heads per rank, Hl (default 16)\n"
    << "  --head-dim <n>            head dim, D (default 512)\n"
    << "  -P, --protocol <p>        AUTO | LL | LL128 | SIMPLE (default AUTO; the table's last column and the\n"
    << "                            JSON's protocolChosen say what each size ran)\n"
    << "  -L, --lse-base <2|e>      base of the LSEs (default 2)\n"
    << "  --virtual-ranks <n>       loopback: n virtual ranks on one GPU, one thread, one process\n"
    << "                            (default 0: real ranks)\n"
    << "  --max-batch <rows>        workspace capacity in rows (default: -e); larger batches run in chunks\n"
    << "  -B, --baseline <0|1|2>    baseline in the same run: 0 none, 1 ncclAlltoAll + combine, 2 the\n"
    << "                            partials' all-to-all alone, to compare with nccl-tests' alltoall_perf\n"
    << "                            (default 1)\n"
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
    << "                                   ncclAllGather of the merged heads (rank-major, no transpose)\n"
    << "                            The size columns stay the partials each rank holds, in every mode.\n"
    << "  --provider <p>            the fused path's workspace: auto | nccl-window | cuda-ipc | fallback\n"
    << "                            (sets NCCL_DCP_PROVIDER; default: as the environment says, else auto)\n"
    << "  --version                 the versions of nccl-dcp and NCCL, then exit\n"
    << "nccl-tests options with no meaning here are refused: -N -p -o -r -z -y -C -S -R -x -D -V -M -u -I -K.\n"
    << "Exit codes: 0 ok, 2 bad arguments, 3 no GPU, 4 wrong results, 5 a call failed.\n";
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
  kOptMinBytes = 256,
  kOptMaxBytes,
  kOptStepBytes,
  kOptHeadDim,
  kOptVirtualRanks,
  kOptMaxBatch,
  kOptTimeline,
  kOptProvider,
  kOptVersion,
  kOptScatter,
  kOptWire,
};

const struct option kLongOptions[] = {
    // nccl-tests' names
    {"nthreads", required_argument, nullptr, 't'},
    {"ngpus", required_argument, nullptr, 'g'},
    {"minbytes", required_argument, nullptr, kOptMinBytes},
    {"maxbytes", required_argument, nullptr, kOptMaxBytes},
    {"stepbytes", required_argument, nullptr, kOptStepBytes},
    {"stepfactor", required_argument, nullptr, 'f'},
    {"iters", required_argument, nullptr, 'n'},
    {"agg_iters", required_argument, nullptr, 'm'},
    {"warmup_iters", required_argument, nullptr, 'w'},
    {"check", required_argument, nullptr, 'c'},
    {"datatype", required_argument, nullptr, 'd'},
    {"timeout", required_argument, nullptr, 'T'},
    {"cudagraph", required_argument, nullptr, 'G'},
    {"output_file", required_argument, nullptr, 'J'},
    {"average", required_argument, nullptr, 'a'},
    {"help", no_argument, nullptr, 'h'},
    // ours
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
    {"version", no_argument, nullptr, kOptVersion},
    {nullptr, 0, nullptr, 0},
};
// ':' first: a missing value comes back as ':', an unknown option as '?'.
const char kShortOptions[] = ":t:g:b:e:i:f:n:m:w:c:d:T:G:J:a:hH:P:L:B:F:";

// How the messages name an option: "-n" or "--head-dim".
std::string optionName(int code) {
  std::string name = code < 256 ? std::string("-") + (char)code : "";
  for (const struct option* o = kLongOptions; o->name; o++)
    if (o->val == code) return name + (name.empty() ? "--" : "/--") + o->name;
  return name.empty() ? "?" : name;
}

// nccl-tests' letters this binary has no use for, and what they mean there.
const char* ncclTestsOnly(int c) {
  switch (c) {
    case 'N': return "--run_cycles";
    case 'p': return "--parallel_init";
    case 'o': return "--op (the reduction here is always the LSE-weighted merge)";
    case 'r': return "--root (an all-to-all has none)";
    case 'z': return "--blocking";
    case 'y': return "--stream_null";
    case 'C': return "--report_cputime";
    case 'S': return "--report_timestamps";
    case 'R': return "--local_register (the workspace: --provider)";
    case 'x': return "--cta_policy";
    case 'D': return "--device_implementation (the head dim: --head-dim)";
    case 'V': return "--device_cta_count (loopback ranks: --virtual-ranks)";
    case 'M': return "--memory";
    case 'u': return "--unalign";
    case 'I': return "--per_iter_timing";
    case 'K': return "--per_iter_skip";
    default: return nullptr;
  }
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
    {'T', 0, 86400, [](Args* a, int64_t v) { a->timeoutS = (int)v; }},
    {'H', 1, NCCL_DCP_MAX_LOCAL_HEADS, [](Args* a, int64_t v) { a->localHeads = (int)v; }},
    {kOptHeadDim, 1, NCCL_DCP_MAX_HEAD_DIM, [](Args* a, int64_t v) { a->headDim = (int)v; }},
    {kOptVirtualRanks, 0, 16, [](Args* a, int64_t v) { a->virtualRanks = (int)v; }},
    {kOptMaxBatch, 0, NCCL_DCP_MAX_BATCH_CAPACITY, [](Args* a, int64_t v) { a->maxBatch = (int)v; }},
    {'B', 0, 2, [](Args* a, int64_t v) { a->baseline = (int)v; }},
    {'F', 0, 1, [](Args* a, int64_t v) { a->floors = (int)v; }},
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
    case 'i':
    case kOptMinBytes:
    case kOptMaxBytes:
    case kOptStepBytes: {
      Size z;
      const bool plainBytes = code >= 256;
      if (!parseSize(v, plainBytes, &z))
        return bad(plainBytes ? "a size in bytes (4096, 32K, 1.5M, 1G)"
                              : "a size: rows (64), or bytes with a suffix (4096B, 32K, 1.5M, 1G)");
      const int64_t hi = z.bytes ? kMaxSizeBytes : (code == 'i' ? NCCL_DCP_MAX_BATCH_CAPACITY : kMaxSweepRows);
      if (z.value > hi) return bad(("at most " + std::to_string(hi) + (z.bytes ? " bytes" : " rows")).c_str());
      if (code == 'b' || code == kOptMinBytes) a->minSize = z;
      if (code == 'e' || code == kOptMaxBytes) a->maxSize = z;
      if (code == 'i' || code == kOptStepBytes) a->stepSize = z;
      return true;
    }
    case 'f': {
      char* end = nullptr;
      a->factor = strtod(v, &end);
      if (end == v || *end != '\0' || !(a->factor > 1.0) || !std::isfinite(a->factor)) return bad("a factor > 1");
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

// Combinations no single option can judge.
bool checkCombination(const Args& a, std::string* error) {
  if (!a.minSize.bytes && !a.maxSize.bytes && a.minSize.value > a.maxSize.value) {
    *error = "-b " + std::to_string(a.minSize.value) + " is larger than -e " + std::to_string(a.maxSize.value);
    return false;
  }
  if (a.minSize.bytes && a.maxSize.bytes && a.minSize.value > a.maxSize.value) {
    *error = "-b / --minbytes " + std::to_string(a.minSize.value) + " B is larger than -e / --maxbytes " +
             std::to_string(a.maxSize.value) + " B";
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

bool parseSize(const char* text, bool plainIsBytes, Size* out) {
  const char* s = text;
  while (*s == ' ') s++;
  if (!*s || *s == '-' || *s == '+') return false;
  char* end = nullptr;
  const double v = strtod(s, &end);
  if (end == s || !std::isfinite(v) || v < 0) return false;
  const bool integral = v == std::floor(v);
  std::string suffix(end);
  for (char& ch : suffix) ch = (char)toupper((unsigned char)ch);
  double unit = 0;
  if (suffix.empty()) unit = plainIsBytes ? 1 : 0;
  else if (suffix == "B") unit = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") unit = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") unit = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") unit = 1024.0 * 1024 * 1024;
  else return false;
  // Only decimal digits, a point and the suffix: no hex, no exponent.
  for (const char* c = s; c < end; c++)
    if (!isdigit((unsigned char)*c) && *c != '.') return false;
  if (unit == 0) {  // rows
    if (!integral || v > 1e15) return false;
    *out = {(int64_t)v, false};
    return true;
  }
  const double bytes = v * unit;
  if (bytes > 9e15 || (unit == 1 && !integral)) return false;
  *out = {(int64_t)bytes, true};
  return true;
}

int64_t bytesPerRow(const Args& a, int nRanks) {
  const int64_t elt = a.dtype == ncclFloat32 ? 4 : 2;
  return (int64_t)std::max(nRanks, 1) * a.localHeads * a.headDim * elt;
}

bool resolveSizes(Args* a, int nRanks, std::string* error) {
  const int64_t perRow = bytesPerRow(*a, nRanks);
  auto rows = [&](const Size& z) {
    if (!z.bytes) return z.value;
    return z.value == 0 ? 0 : std::max<int64_t>(z.value / perRow, 1);
  };
  a->minRows = rows(a->minSize);
  a->maxRows = rows(a->maxSize);
  a->step = rows(a->stepSize);
  const std::string unit = " rows (one row = " + std::to_string(perRow) + " B at " + std::to_string(nRanks) +
                           " ranks)";
  if (a->minRows > a->maxRows) {
    *error = "-b is " + std::to_string(a->minRows) + " rows, more than -e's " + std::to_string(a->maxRows) + unit;
    return false;
  }
  if (a->maxRows > kMaxSweepRows) {
    *error = "-e is " + std::to_string(a->maxRows) + unit + ": at most " + std::to_string(kMaxSweepRows);
    return false;
  }
  if (a->step > NCCL_DCP_MAX_BATCH_CAPACITY) {
    *error = "-i is " + std::to_string(a->step) + unit + ": at most " + std::to_string(NCCL_DCP_MAX_BATCH_CAPACITY);
    return false;
  }
  return true;
}

std::string sizeNote(const Args& a, int nRanks) {
  if (!a.minSize.bytes && !a.maxSize.bytes && !a.stepSize.bytes) return "";
  std::ostringstream o;
  o << "# sizes in bytes -> rows: one row = " << nRanks << " ranks x Hl " << a.localHeads << " x D " << a.headDim
    << " x " << (a.dtype == ncclFloat32 ? 4 : 2) << " B = " << bytesPerRow(a, nRanks) << " B:";
  const std::pair<const char*, std::pair<Size, int64_t>> sizes[] = {
      {"-b", {a.minSize, a.minRows}}, {"-e", {a.maxSize, a.maxRows}}, {"-i", {a.stepSize, a.step}}};
  for (const auto& [flag, z] : sizes)
    if (z.first.bytes) o << " " << flag << " " << z.first.value << " B = " << z.second << " rows;";
  std::string s = o.str();
  s.back() = '\n';
  return s;
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
      const char* there = optopt > 0 && optopt < 256 ? ncclTestsOnly(optopt) : nullptr;
      if (there) *error = std::string("option -") + (char)optopt + " is nccl-tests' " + there + ", which this binary does not have";
      else if (optopt > 0 && optopt < 256) *error = std::string("unknown option -") + (char)optopt;
      else *error = "unknown option '" + given + "'";
      return ParseResult::Error;
    }
    if (c == ':') {
      *error = "option " + (optopt > 0 ? optionName(optopt) : given) + " needs a value";
      return ParseResult::Error;
    }
    if (c == 'h') return ParseResult::Help;
    if (c == kOptVersion) return ParseResult::Version;
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
