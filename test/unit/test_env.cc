// NCCL_DCP_* parsing (src/env.h) through a table-driven getter: valid
// values of every variable, invalid ones ignored with a warning that names
// the variable, defaults when unset; and every variable documented in
// docs/environment.md.
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "env.h"
#include "error.h"
#include "test_util.h"
#include "validate.h"
#include "error.h"
#include "validate.h"
#include "test_util.h"

namespace nccl_dcp {
namespace {

// The environment parseEnv sees, and every name it asked for.
std::map<std::string, std::string> gTable;
std::set<std::string> gAsked;

const char* tableGet(const char* name) {
  gAsked.insert(name);
  auto it = gTable.find(name);
  return it == gTable.end() ? nullptr : it->second.c_str();
}

class EnvParse : public ::testing::Test {
 protected:
  void SetUp() override {
    gTable.clear();
    gAsked.clear();
  }

  // Parses with only `name` set to `value`.
  Env parseOne(const std::string& name, const std::string& value) {
    gTable = {{name, value}};
    warnings.clear();
    return parseEnv(tableGet, &warnings);
  }

  // Exactly one warning, naming the variable and the value it ignored.
  ::testing::AssertionResult WarnedAbout(const std::string& name, const std::string& value) const {
    if (warnings.size() != 1)
      return ::testing::AssertionFailure() << warnings.size() << " warnings for " << name << "=" << value;
    if (warnings[0].find(name + "=" + value) == std::string::npos)
      return ::testing::AssertionFailure() << "warning \"" << warnings[0] << "\" does not name " << name << "=" << value;
    return ::testing::AssertionSuccess();
  }

  std::vector<std::string> warnings;
};

// Every field at its default: what an empty environment gives.
void expectDefaults(const Env& e, const char* except = "") {
  const std::string skip = except;
  if (skip != "NCCL_DCP_DEBUG") { EXPECT_EQ(e.debug, LogLevel::Warn); }
  if (skip != "NCCL_DCP_DEBUG_FILE") { EXPECT_EQ(e.debugFile, ""); }
  if (skip != "NCCL_DCP_PROTO") { EXPECT_EQ(e.protocol, kEnvUnset); }
  if (skip != "NCCL_DCP_TIMEOUT_MS") { EXPECT_EQ(e.timeoutMs, kEnvUnset); }
  if (skip != "NCCL_DCP_MAX_BATCH") { EXPECT_EQ(e.maxBatch, kEnvUnset); }
  if (skip != "NCCL_DCP_SIMPLE_MIN_ROWS") { EXPECT_EQ(e.simpleMinRows, kEnvUnset); }
  if (skip != "NCCL_DCP_FORCE_FALLBACK") { EXPECT_FALSE(e.forceFallback); }
  if (skip != "NCCL_DCP_PDL") { EXPECT_EQ(e.pdl, kEnvUnset); }
  if (skip != "NCCL_DCP_SIMPLE_SEND_WARPS") { EXPECT_EQ(e.simpleSendWarps, kEnvUnset); }
  if (skip != "NCCL_DCP_PROVIDER") { EXPECT_EQ(e.provider, kEnvUnset); }
  if (skip != "NCCL_DCP_NONE_ALGO") { EXPECT_EQ(e.noneAlgo, kEnvUnset); }
}

TEST_F(EnvParse, EmptyEnvironmentGivesDefaults) {
  warnings.clear();
  const Env e = parseEnv(tableGet, &warnings);
  expectDefaults(e);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(EnvParse, DebugLevelsAreCaseInsensitive) {
  const std::pair<const char*, LogLevel> cases[] = {
      {"NONE", LogLevel::None}, {"none", LogLevel::None},   {"VERSION", LogLevel::Version}, {"version", LogLevel::Version},
      {"WARN", LogLevel::Warn}, {"Warn", LogLevel::Warn},   {"INFO", LogLevel::Info},       {"info", LogLevel::Info},
      {"TRACE", LogLevel::Trace}, {"tRaCe", LogLevel::Trace}};
  for (auto [value, level] : cases) {
    const Env e = parseOne("NCCL_DCP_DEBUG", value);
    EXPECT_EQ(e.debug, level) << value;
    EXPECT_TRUE(warnings.empty()) << value;
    expectDefaults(e, "NCCL_DCP_DEBUG");
  }
}

TEST_F(EnvParse, InvalidDebugLevelIgnored) {
  for (const char* value : {"VERBOSE", "2", "", "WARNING", "INFO "}) {
    const Env e = parseOne("NCCL_DCP_DEBUG", value);
    EXPECT_EQ(e.debug, LogLevel::Warn) << value;
    EXPECT_TRUE(WarnedAbout("NCCL_DCP_DEBUG", value));
  }
}

TEST_F(EnvParse, DebugFileTakenVerbatim) {
  for (const char* value : {"/tmp/dcp.%h.%p.log", "relative.log", "with space"}) {
    const Env e = parseOne("NCCL_DCP_DEBUG_FILE", value);
    EXPECT_EQ(e.debugFile, value);
    EXPECT_TRUE(warnings.empty());
    expectDefaults(e, "NCCL_DCP_DEBUG_FILE");
  }
}

TEST_F(EnvParse, ProtocolNamesAreCaseInsensitive) {
  const std::pair<const char*, int> cases[] = {{"AUTO", ncclDcpProtoAuto},     {"auto", ncclDcpProtoAuto},
                                               {"LL", ncclDcpProtoLL},         {"ll", ncclDcpProtoLL},
                                               {"LL128", ncclDcpProtoLL128},   {"Ll128", ncclDcpProtoLL128},
                                               {"SIMPLE", ncclDcpProtoSimple}, {"simple", ncclDcpProtoSimple}};
  for (auto [value, proto] : cases) {
    const Env e = parseOne("NCCL_DCP_PROTO", value);
    EXPECT_EQ(e.protocol, proto) << value;
    EXPECT_TRUE(warnings.empty()) << value;
    expectDefaults(e, "NCCL_DCP_PROTO");
  }
}

TEST_F(EnvParse, InvalidProtocolIgnored) {
  for (const char* value : {"LL64", "1", "", "SIMPLE,LL", "tree"}) {
    const Env e = parseOne("NCCL_DCP_PROTO", value);
    EXPECT_EQ(e.protocol, kEnvUnset) << value;
    EXPECT_TRUE(WarnedAbout("NCCL_DCP_PROTO", value));
  }
}

// The integer variables: each with its valid range.
struct IntVariable {
  const char* name;
  int Env::*field;
  std::vector<std::pair<const char*, int>> valid;
  std::vector<const char*> invalid;
};

const IntVariable kIntVariables[] = {
    {"NCCL_DCP_TIMEOUT_MS",
     &Env::timeoutMs,
     {{"0", 0}, {"1", 1}, {"5000", 5000}, {"86400000", 86400000}},
     {"-1", "86400001", "abc", "10ms", "", "1.5", "99999999999999999999"}},
    {"NCCL_DCP_MAX_BATCH",
     &Env::maxBatch,
     {{"1", 1}, {"256", 256}, {"1048576", 1048576}},
     {"0", "-5", "1048577", "x", "", "64 rows"}},
    {"NCCL_DCP_SIMPLE_MIN_ROWS",
     &Env::simpleMinRows,
     {{"0", 0}, {"32", 32}, {"1048576", 1048576}},
     {"-1", "1048577", "1e3", ""}},
    {"NCCL_DCP_PDL", &Env::pdl, {{"0", 0}, {"1", 1}}, {"2", "-1", "on", "true", ""}},
    {"NCCL_DCP_SIMPLE_SEND_WARPS", &Env::simpleSendWarps, {{"1", 1}, {"7", 7}}, {"0", "8", "-1", "all", ""}},
};

TEST_F(EnvParse, IntegerVariablesInRangeAccepted) {
  for (const IntVariable& v : kIntVariables) {
    for (auto [value, want] : v.valid) {
      const Env e = parseOne(v.name, value);
      EXPECT_EQ(e.*v.field, want) << v.name << "=" << value;
      EXPECT_TRUE(warnings.empty()) << v.name << "=" << value;
      expectDefaults(e, v.name);
    }
  }
}

TEST_F(EnvParse, IntegerVariablesOutOfRangeIgnored) {
  for (const IntVariable& v : kIntVariables) {
    for (const char* value : v.invalid) {
      const Env e = parseOne(v.name, value);
      EXPECT_EQ(e.*v.field, kEnvUnset) << v.name << "=" << value;
      EXPECT_TRUE(WarnedAbout(v.name, value));
      expectDefaults(e);
    }
  }
}

TEST_F(EnvParse, ForceFallbackIsZeroOrOne) {
  EXPECT_FALSE(parseOne("NCCL_DCP_FORCE_FALLBACK", "0").forceFallback);
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(parseOne("NCCL_DCP_FORCE_FALLBACK", "1").forceFallback);
  EXPECT_TRUE(warnings.empty());
  for (const char* value : {"2", "yes", "true", "", "-1"}) {
    EXPECT_FALSE(parseOne("NCCL_DCP_FORCE_FALLBACK", value).forceFallback) << value;
    EXPECT_TRUE(WarnedAbout("NCCL_DCP_FORCE_FALLBACK", value));
  }
}

TEST_F(EnvParse, ProviderByName) {
  const struct {
    const char* value;
    int provider;
  } names[] = {{"auto", ncclDcpProviderAuto},
               {"nccl-window", ncclDcpProviderNcclWindow},
               {"CUDA-IPC", ncclDcpProviderCudaIpc},
               {"fallback", ncclDcpProviderFallback}};
  for (const auto& n : names) {
    EXPECT_EQ(parseOne("NCCL_DCP_PROVIDER", n.value).provider, n.provider) << n.value;
    EXPECT_TRUE(warnings.empty());
  }
  for (const char* value : {"ipc", "", "1", "nccl_window"}) {
    EXPECT_EQ(parseOne("NCCL_DCP_PROVIDER", value).provider, kEnvUnset) << value;
    EXPECT_TRUE(WarnedAbout("NCCL_DCP_PROVIDER", value));
  }
}

// NCCL_DCP_NONE_ALGO by name, into the config as NoneAlgo (unset: the default).
TEST_F(EnvParse, NoneAlgoByName) {
  const struct {
    const char* value;
    NoneAlgo algo;
  } names[] = {{"auto", NoneAlgo::Auto}, {"DIRECT", NoneAlgo::Direct}, {"two_phase", NoneAlgo::TwoPhase}};
  for (const auto& n : names) {
    const Env e = parseOne("NCCL_DCP_NONE_ALGO", n.value);
    EXPECT_EQ(e.noneAlgo, (int)n.algo) << n.value;
    EXPECT_TRUE(warnings.empty());
    const ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
    Config cfg;
    ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
    EXPECT_EQ(cfg.noneAlgo, n.algo) << n.value;
  }
  for (const char* value : {"two-phase", "", "2", "gather"}) {
    EXPECT_EQ(parseOne("NCCL_DCP_NONE_ALGO", value).noneAlgo, kEnvUnset) << value;
    EXPECT_TRUE(WarnedAbout("NCCL_DCP_NONE_ALGO", value));
  }
  Config cfg;
  const ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, ncclDcpProtoLL);
  ASSERT_EQ(resolveConfig(&c, Env(), &cfg), ncclSuccess) << lastError();
  EXPECT_EQ(cfg.noneAlgo, kDefaultNoneAlgo);
}

// NCCL_DCP_FORCE_FALLBACK=1 is NCCL_DCP_PROVIDER=fallback; the two cannot disagree.
TEST_F(EnvParse, ForceFallbackIsTheFallbackProvider) {
  const ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2, 16, NCCL_CONFIG_UNDEF_INT);
  Config cfg;
  Env e;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
  EXPECT_EQ(cfg.provider, ncclDcpProviderAuto);
  e.forceFallback = true;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
  EXPECT_EQ(cfg.provider, ncclDcpProviderFallback);
  e.provider = ncclDcpProviderFallback;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
  e.provider = ncclDcpProviderCudaIpc;
  EXPECT_EQ(resolveConfig(&c, e, &cfg), ncclInvalidUsage);
  EXPECT_NE(std::string(lastError()).find("NCCL_DCP_PROVIDER=cuda-ipc"), std::string::npos) << lastError();
  e.forceFallback = false;
  ASSERT_EQ(resolveConfig(&c, e, &cfg), ncclSuccess) << lastError();
  EXPECT_EQ(cfg.provider, ncclDcpProviderCudaIpc);
}

TEST(EnvNames, MisspeltVariablesAreFound) {
  const char* environ[] = {"PATH=/bin", "NCCL_DCP_PROTO=LL", "NCCL_DCP_PROTOCOL=LL", "NCCL_DCP_PROFILE_FILE=x",
                           "NCCL_DCP_TIMEOUT=5", "NCCL_DEBUG=INFO", "NCCL_DCP_LIB=/x.so", nullptr};
  const std::vector<std::string> unknown = unknownVariables(environ);
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0], "NCCL_DCP_PROTOCOL");
  EXPECT_EQ(unknown[1], "NCCL_DCP_TIMEOUT");
  EXPECT_TRUE(unknownVariables(nullptr).empty());
  std::vector<const char*> names = envVariableNames();
  names.insert(names.end(), otherVariableNames().begin(), otherVariableNames().end());
  for (const char* name : names) {
    const std::string entry = std::string(name) + "=1";
    const char* one[] = {entry.c_str(), nullptr};
    EXPECT_TRUE(unknownVariables(one).empty()) << name;
  }
}

TEST_F(EnvParse, EveryVariableAtOnce) {
  gTable = {{"NCCL_DCP_DEBUG", "info"},          {"NCCL_DCP_DEBUG_FILE", "dcp.log"},
            {"NCCL_DCP_PROTO", "ll128"},         {"NCCL_DCP_TIMEOUT_MS", "250"},
            {"NCCL_DCP_MAX_BATCH", "512"},       {"NCCL_DCP_SIMPLE_MIN_ROWS", "96"},
            {"NCCL_DCP_FORCE_FALLBACK", "1"},    {"NCCL_DCP_PDL", "0"},
            {"NCCL_DCP_SIMPLE_SEND_WARPS", "4"}, {"NCCL_DCP_PROVIDER", "cuda-ipc"},
            {"NCCL_DCP_NONE_ALGO", "Two_Phase"}};
  const Env e = parseEnv(tableGet, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(e.noneAlgo, (int)NoneAlgo::TwoPhase);
  EXPECT_EQ(e.provider, ncclDcpProviderCudaIpc);
  EXPECT_EQ(e.debug, LogLevel::Info);
  EXPECT_EQ(e.debugFile, "dcp.log");
  EXPECT_EQ(e.protocol, ncclDcpProtoLL128);
  EXPECT_EQ(e.timeoutMs, 250);
  EXPECT_EQ(e.maxBatch, 512);
  EXPECT_EQ(e.simpleMinRows, 96);
  EXPECT_TRUE(e.forceFallback);
  EXPECT_EQ(e.pdl, 0);
  EXPECT_EQ(e.simpleSendWarps, 4);
}

TEST_F(EnvParse, OneWarningPerInvalidVariable) {
  gTable = {{"NCCL_DCP_DEBUG", "loud"},   {"NCCL_DCP_PROTO", "fast"},         {"NCCL_DCP_TIMEOUT_MS", "soon"},
            {"NCCL_DCP_MAX_BATCH", "0"},  {"NCCL_DCP_SIMPLE_MIN_ROWS", "-3"}, {"NCCL_DCP_FORCE_FALLBACK", "maybe"},
            {"NCCL_DCP_PDL", "7"},        {"NCCL_DCP_SIMPLE_SEND_WARPS", "16"}, {"NCCL_DCP_PROVIDER", "ipc"},
            {"NCCL_DCP_NONE_ALGO", "two-phase"}};
  const Env e = parseEnv(tableGet, &warnings);
  expectDefaults(e);
  ASSERT_EQ(warnings.size(), gTable.size());
  for (const auto& [name, value] : gTable) {
    size_t naming = 0;
    for (const std::string& w : warnings) naming += w.find(name + "=" + value) != std::string::npos;
    EXPECT_EQ(naming, 1u) << name;
  }
}

TEST_F(EnvParse, WarningsMayBeDiscarded) {
  gTable = {{"NCCL_DCP_PROTO", "fast"}, {"NCCL_DCP_TIMEOUT_MS", "soon"}};
  const Env e = parseEnv(tableGet, nullptr);
  expectDefaults(e);
}

TEST_F(EnvParse, EveryVariableReadIsListed) {
  // The names parseEnv asks for, as the getter saw them, are all in
  // envVariableNames() (which the README test checks against docs/environment.md).
  parseEnv(tableGet, &warnings);
  ASSERT_FALSE(gAsked.empty());
  const std::vector<const char*>& listed = envVariableNames();
  for (const std::string& name : gAsked) {
    bool found = false;
    for (const char* l : listed) found = found || name == l;
    EXPECT_TRUE(found) << name << " is read but missing from envVariableNames()";
  }
}

TEST(EnvNames, UniqueAndPrefixed) {
  std::vector<const char*> names = envVariableNames();
  names.insert(names.end(), otherVariableNames().begin(), otherVariableNames().end());
  std::set<std::string> seen;
  for (const char* n : names) {
    EXPECT_EQ(std::string(n).rfind("NCCL_DCP_", 0), 0u) << n;
    EXPECT_TRUE(seen.insert(n).second) << n << " listed twice";
  }
}

// ---------------------------------------------------------------------------
// docs/environment.md (the README links to it).

namespace fs = std::filesystem;

bool isProjectRoot(const fs::path& dir) {
  std::ifstream meson(dir / "meson.build");
  if (!meson) return false;
  std::stringstream text;
  text << meson.rdbuf();
  return text.str().find("project('nccl-dcp'") != std::string::npos;
}

// NCCL_DCP_SOURCE_ROOT if set, else the nearest ancestor of the working
// directory (meson runs tests in the build directory) whose meson.build is
// this project's.
fs::path sourceRoot() {
  if (const char* root = getenv("NCCL_DCP_SOURCE_ROOT")) return root;
  std::error_code ec;
  for (fs::path dir = fs::current_path(ec); !ec && !dir.empty(); dir = dir.parent_path()) {
    if (isProjectRoot(dir)) return dir;
    if (dir == dir.root_path()) break;
  }
  return {};
}

// `name` appears as a whole word: NCCL_DCP_DEBUG_FILE does not document
// NCCL_DCP_DEBUG.
bool mentions(const std::string& doc, const std::string& name) {
  auto isNameChar = [](char c) { return std::isalnum((unsigned char)c) || c == '_'; };
  for (size_t at = doc.find(name); at != std::string::npos; at = doc.find(name, at + 1)) {
    const bool startsWord = at == 0 || !isNameChar(doc[at - 1]);
    const size_t end = at + name.size();
    const bool endsWord = end == doc.size() || !isNameChar(doc[end]);
    if (startsWord && endsWord) return true;
  }
  return false;
}

TEST(EnvReadme, MentionsMatchWholeNames) {
  EXPECT_TRUE(mentions("set `NCCL_DCP_DEBUG=INFO`", "NCCL_DCP_DEBUG"));
  EXPECT_TRUE(mentions("NCCL_DCP_PDL", "NCCL_DCP_PDL"));
  EXPECT_FALSE(mentions("NCCL_DCP_DEBUG_FILE only", "NCCL_DCP_DEBUG"));
  EXPECT_FALSE(mentions("XNCCL_DCP_PDL", "NCCL_DCP_PDL"));
}

TEST(EnvReadme, EveryVariableIsDocumented) {
  const fs::path root = sourceRoot();
  if (root.empty())
    GTEST_SKIP() << "source root not found from " << fs::current_path()
                 << ": set NCCL_DCP_SOURCE_ROOT to the nccl-dcp checkout";
  const fs::path readme = root / "docs" / "environment.md";
  std::ifstream in(readme);
  if (!in) GTEST_SKIP() << readme << " does not exist yet: nothing to check the variables against";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  for (const char* name : envVariableNames())
    EXPECT_TRUE(mentions(doc, name)) << name << " is not documented in " << readme;
  for (const char* name : otherVariableNames())
    EXPECT_TRUE(mentions(doc, name)) << name << " (read outside the library) is not documented in " << readme;
}

// The contract of env() that nccl_dcp.h states: the process environment is
// read once, at the first call that needs it, and kept. A test (or an
// application) that sets a variable after that changes nothing.
TEST(EnvOnce, VariablesAreReadOncePerProcess) {
  const int first = env().maxBatch;
  const std::string other = std::to_string(first == 77 ? 78 : 77);
  setenv("NCCL_DCP_MAX_BATCH", other.c_str(), 1);
  EXPECT_EQ(env().maxBatch, first) << "env() read NCCL_DCP_MAX_BATCH again";
  ncclDcpConfig_t c = test::makeConfig(128, 4, ncclBfloat16, ncclDcpLseBase2);
  c.maxBatch = NCCL_CONFIG_UNDEF_INT;
  Config cfg;
  ASSERT_EQ(resolveConfig(&c, env(), &cfg), ncclSuccess) << ncclDcpGetLastError();
  EXPECT_NE(cfg.maxBatch, std::stoi(other)) << "a variable set after the first read took effect";
  unsetenv("NCCL_DCP_MAX_BATCH");
}

// ... and says so, with the variable read at each create.
TEST(EnvOnce, TheHeaderSaysSo) {
  const fs::path root = sourceRoot();
  if (root.empty())
    GTEST_SKIP() << "source root not found from " << fs::current_path()
                 << ": set NCCL_DCP_SOURCE_ROOT to the nccl-dcp checkout";
  std::ifstream in(root / "include" / "nccl_dcp.h");
  ASSERT_TRUE(in) << root / "include" / "nccl_dcp.h";
  std::stringstream text;
  text << in.rdbuf();
  // The comment's words, one space apart (no line breaks, no " * ").
  std::string words;
  std::istringstream tokens(text.str());
  for (std::string w; tokens >> w;)
    if (w != "*") words += (words.empty() ? "" : " ") + w;
  EXPECT_NE(words.find("NCCL_DCP_* variables ONCE PER PROCESS"), std::string::npos)
      << "nccl_dcp.h does not say that NCCL_DCP_* are read once per process";
  EXPECT_NE(words.find("The one variable read at each create is NCCL's NCCL_CUMEM_ENABLE"), std::string::npos)
      << "nccl_dcp.h does not name the variable read at each create";
}

}  // namespace
}  // namespace nccl_dcp
