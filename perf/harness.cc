#include "harness.h"

#include <strings.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "nccl_dcp.h"

namespace nccl_dcp {
namespace perf {

const char* dtypeFlag(ncclDataType_t d) {
  switch (d) {
    case ncclBfloat16: return "bf16";
    case ncclFloat16: return "fp16";
    case ncclFloat32: return "fp32";
    default: return "?";
  }
}

const char* protocolFlag(int p) {
  switch (p) {
    case ncclDcpProtoLL: return "LL";
    case ncclDcpProtoLL128: return "LL128";
    case ncclDcpProtoSimple: return "SIMPLE";
    default: return "AUTO";
  }
}

std::string usage(const char* program) {
  std::ostringstream o;
  o << "USAGE: " << program << " [flags]\n"
    << "  nccl-tests flags (batch rows play the role of sizes):\n"
    << "  -b <rows>      minimum batch (default 1)\n"
    << "  -e <rows>      maximum batch (default 1024)\n"
    << "  -f <factor>    multiply the batch by this between sizes (default 2)\n"
    << "  -i <rows>      add this to the batch between sizes instead (default 0: use -f)\n"
    << "  -g <gpus>      GPUs per thread (default 1)\n"
    << "  -t <threads>   threads (default 1); ranks = threads x gpus (x MPI processes)\n"
    << "  -n <iters>     timed graph launches per size (default 20; the median is reported)\n"
    << "  -w <iters>     warm-up launches per size (default 5)\n"
    << "  -c <0|n>       check n calls per size against the CPU reference (default 1)\n"
    << "  -G <calls>     calls captured per CUDA graph (default 10; 0 = eager launches)\n"
    << "  -a <0-3>       aggregate across ranks: 0 rank 0, 1 average, 2 min, 3 max (default 1)\n"
    << "  -d <type>      bf16 | fp16 | fp32 (default bf16)\n"
    << "  nccl-dcp flags:\n"
    << "  -D <dim>       head dim (default 512)\n"
    << "  -H <heads>     local heads per rank (default 16)\n"
    << "  -P <proto>     AUTO | LL | LL128 | SIMPLE (default AUTO)\n"
    << "  -L <2|e>       LSE base (default 2)\n"
    << "  -V <n>         loopback: n virtual ranks on one GPU (default 0: real ranks)\n"
    << "  -m <rows>      workspace capacity in rows (default: -e)\n"
    << "  -B <0|1>       also run the baseline, ncclAlltoAll + combine (default 1)\n"
    << "  -J <file>      write the results as JSON\n"
    << "  -h             this help\n"
    << "Exit codes: 0 ok, 2 bad arguments, 3 no GPU, 4 wrong results, 5 a call failed.\n";
  return o.str();
}

namespace {

bool toInt(const char* s, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

ParseResult parseArgs(int argc, char** argv, Args* a, std::string* error) {
  for (int i = 1; i < argc; i++) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return ParseResult::Help;
    if (flag.size() != 2 || flag[0] != '-') {
      *error = "unknown argument '" + flag + "'";
      return ParseResult::Error;
    }
    if (std::string("befigtnwcGadDHPLVmBJ").find(flag[1]) == std::string::npos) {
      *error = "unknown flag " + flag;
      return ParseResult::Error;
    }
    if (i + 1 >= argc) {
      *error = "flag " + flag + " needs a value";
      return ParseResult::Error;
    }
    const char* v = argv[++i];
    int64_t n = 0;
    auto intIn = [&](int64_t lo, int64_t hi) {
      if (toInt(v, lo, hi, &n)) return true;
      *error = "flag " + flag + ": '" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]";
      return false;
    };
    switch (flag[1]) {
      case 'b': if (!intIn(0, NCCL_DCP_MAX_BATCH_CAPACITY * 64LL)) return ParseResult::Error; a->minRows = n; break;
      case 'e': if (!intIn(0, NCCL_DCP_MAX_BATCH_CAPACITY * 64LL)) return ParseResult::Error; a->maxRows = n; break;
      case 'i': if (!intIn(0, NCCL_DCP_MAX_BATCH_CAPACITY)) return ParseResult::Error; a->step = n; break;
      case 'g': if (!intIn(1, 64)) return ParseResult::Error; a->gpusPerThread = (int)n; break;
      case 't': if (!intIn(1, 64)) return ParseResult::Error; a->threads = (int)n; break;
      case 'n': if (!intIn(1, 1000000)) return ParseResult::Error; a->iters = (int)n; break;
      case 'w': if (!intIn(0, 1000000)) return ParseResult::Error; a->warmup = (int)n; break;
      case 'c': if (!intIn(0, 1000)) return ParseResult::Error; a->check = (int)n; break;
      case 'G': if (!intIn(0, 10000)) return ParseResult::Error; a->graphCalls = (int)n; break;
      case 'a': if (!intIn(0, 3)) return ParseResult::Error; a->aggregate = (int)n; break;
      case 'D': if (!intIn(1, NCCL_DCP_MAX_HEAD_DIM)) return ParseResult::Error; a->headDim = (int)n; break;
      case 'H': if (!intIn(1, NCCL_DCP_MAX_LOCAL_HEADS)) return ParseResult::Error; a->localHeads = (int)n; break;
      case 'V': if (!intIn(0, 16)) return ParseResult::Error; a->virtualRanks = (int)n; break;
      case 'm': if (!intIn(0, NCCL_DCP_MAX_BATCH_CAPACITY)) return ParseResult::Error; a->maxBatch = (int)n; break;
      case 'B': if (!intIn(0, 1)) return ParseResult::Error; a->baseline = (int)n; break;
      case 'f': {
        char* end = nullptr;
        a->factor = strtod(v, &end);
        if (end == v || *end != '\0' || !(a->factor > 1.0)) {
          *error = "flag -f: '" + std::string(v) + "' is not a factor > 1";
          return ParseResult::Error;
        }
        break;
      }
      case 'd':
        if (!strcasecmp(v, "bf16") || !strcasecmp(v, "bfloat16")) a->dtype = ncclBfloat16;
        else if (!strcasecmp(v, "fp16") || !strcasecmp(v, "half")) a->dtype = ncclFloat16;
        else if (!strcasecmp(v, "fp32") || !strcasecmp(v, "float")) a->dtype = ncclFloat32;
        else { *error = "flag -d: '" + std::string(v) + "' is not bf16, fp16 or fp32"; return ParseResult::Error; }
        break;
      case 'P':
        if (!strcasecmp(v, "AUTO")) a->protocol = ncclDcpProtoAuto;
        else if (!strcasecmp(v, "LL")) a->protocol = ncclDcpProtoLL;
        else if (!strcasecmp(v, "LL128")) a->protocol = ncclDcpProtoLL128;
        else if (!strcasecmp(v, "SIMPLE")) a->protocol = ncclDcpProtoSimple;
        else { *error = "flag -P: '" + std::string(v) + "' is not AUTO, LL, LL128 or SIMPLE"; return ParseResult::Error; }
        break;
      case 'L':
        if (!strcmp(v, "2")) a->lseBase = ncclDcpLseBase2;
        else if (!strcasecmp(v, "e")) a->lseBase = ncclDcpLseBaseE;
        else { *error = "flag -L: '" + std::string(v) + "' is not 2 or e"; return ParseResult::Error; }
        break;
      case 'J': a->json = v; break;
      default:
        *error = "unknown flag " + flag;
        return ParseResult::Error;
    }
  }
  if (a->minRows > a->maxRows) {
    *error = "-b " + std::to_string(a->minRows) + " is larger than -e " + std::to_string(a->maxRows);
    return ParseResult::Error;
  }
  return ParseResult::Ok;
}

std::vector<int64_t> batchSweep(const Args& a) {
  std::vector<int64_t> sizes;
  int64_t b = a.minRows;
  while (b <= a.maxRows) {
    sizes.push_back(b);
    int64_t next = a.step > 0 ? b + a.step : (int64_t)std::ceil(b * a.factor);
    if (next <= b) next = b + 1;  // -b 0 with a factor still advances
    b = next;
  }
  return sizes;
}

void fillBandwidths(Row* r, int nRanks) {
  const double busFactor = nRanks > 1 ? (double)(nRanks - 1) / nRanks : 1.0;
  auto bw = [&](double us) { return us > 0 ? r->bytes / (us * 1e3) : 0.0; };  // GB/s
  r->fusedAlgBw = bw(r->fusedUs);
  r->fusedBusBw = r->fusedAlgBw * busFactor;
  r->baseAlgBw = bw(r->baseUs);
  r->baseBusBw = r->baseAlgBw * busFactor;
  r->speedup = r->fusedUs > 0 && r->baseUs > 0 ? r->baseUs / r->fusedUs : 0;
}

std::string tableHeader(const Args& a, bool withIdeal) {
  char line[512];
  std::string h;
  snprintf(line, sizeof(line), "#  dtype %s  D %d  Hl %d  protocol %s  LSE base %s  graph calls %d  iters %d\n",
           dtypeFlag(a.dtype), a.headDim, a.localHeads, protocolFlag(a.protocol), a.lseBase ? "e" : "2",
           a.graphCalls, a.iters);
  h += line;
  snprintf(line, sizeof(line), "#%10s %12s   %28s %7s   %28s %7s  %8s%s\n", "", "", "fused (nccl-dcp)", "",
           "baseline (a2a + combine)", "", "", withIdeal ? "" : "");
  h += line;
  snprintf(line, sizeof(line), "#%10s %12s %9s %8s %8s %7s %9s %8s %8s %7s %8s%s\n", "rows", "bytes", "time",
           "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "speedup",
           withIdeal ? "   xIdeal" : "");
  h += line;
  snprintf(line, sizeof(line), "#%10s %12s %9s %8s %8s %7s %9s %8s %8s %7s %8s%s\n", "", "(B)", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(x)", withIdeal ? "      (x)" : "");
  h += line;
  return h;
}

std::string formatRow(const Row& r, bool withBaseline, bool withIdeal) {
  char wrongF[16], wrongB[16], line[512];
  auto wrong = [](char* buf, int64_t w) {
    if (w < 0) snprintf(buf, 16, "%s", "N/A");
    else snprintf(buf, 16, "%lld", (long long)w);
  };
  wrong(wrongF, r.fusedWrong);
  wrong(wrongB, r.baseWrong);
  char ideal[32] = "";
  if (withIdeal) snprintf(ideal, sizeof(ideal), " %8.2f", r.idealUs > 0 ? r.fusedUs / r.idealUs : 0.0);
  if (withBaseline)
    snprintf(line, sizeof(line), " %10lld %12lld %9.2f %8.2f %8.2f %7s %9.2f %8.2f %8.2f %7s %8.2f%s\n",
             (long long)r.rows, (long long)r.bytes, r.fusedUs, r.fusedAlgBw, r.fusedBusBw, wrongF, r.baseUs,
             r.baseAlgBw, r.baseBusBw, wrongB, r.speedup, ideal);
  else
    snprintf(line, sizeof(line), " %10lld %12lld %9.2f %8.2f %8.2f %7s %9s %8s %8s %7s %8s%s\n", (long long)r.rows,
             (long long)r.bytes, r.fusedUs, r.fusedAlgBw, r.fusedBusBw, wrongF, "-", "-", "-", "-", "-", ideal);
  return line;
}

std::string jsonReport(const Args& a, const std::string& mode, const std::string& device, int nRanks,
                       double copyGBps, const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "{\n  \"tool\": \"dcp_a2a_lse_reduce_perf\",\n  \"version\": " << NCCL_DCP_VERSION_CODE
    << ",\n  \"mode\": \"" << mode << "\",\n  \"device\": \"" << device << "\",\n  \"nRanks\": " << nRanks
    << ",\n  \"dtype\": \"" << dtypeFlag(a.dtype) << "\",\n  \"headDim\": " << a.headDim
    << ",\n  \"localHeads\": " << a.localHeads << ",\n  \"protocol\": \"" << protocolFlag(a.protocol)
    << "\",\n  \"lseBase\": \"" << (a.lseBase ? "e" : "2") << "\",\n  \"graphCalls\": " << a.graphCalls
    << ",\n  \"iters\": " << a.iters << ",\n  \"copyGBps\": " << copyGBps << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    o << "    {\"rows\": " << r.rows << ", \"bytes\": " << r.bytes << ", \"fusedUs\": " << r.fusedUs
      << ", \"fusedAlgBw\": " << r.fusedAlgBw << ", \"fusedBusBw\": " << r.fusedBusBw
      << ", \"fusedWrong\": " << r.fusedWrong << ", \"baseUs\": " << r.baseUs << ", \"baseAlgBw\": " << r.baseAlgBw
      << ", \"baseBusBw\": " << r.baseBusBw << ", \"baseWrong\": " << r.baseWrong << ", \"speedup\": " << r.speedup
      << ", \"idealUs\": " << r.idealUs << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace perf
}  // namespace nccl_dcp
