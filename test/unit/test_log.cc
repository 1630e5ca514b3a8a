/*************************************************************************
 * Logging (src/log.cc): the levels of NCCL_DCP_DEBUG and where the lines
 * go (NCCL_DCP_DEBUG_FILE, %h and %p expanded). The log opens at a
 * process's first line and stays open, so each case logs from a child
 * process of its own (fork), under an environment set with
 * setEnvForTesting, its stdout sent to a file; this process reads what it
 * wrote. Needs no GPU.
 ************************************************************************/
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "log.h"
#include "test_util.h"

namespace nccl_dcp {
namespace test {
namespace {

const LogLevel kLevels[] = {LogLevel::Version, LogLevel::Warn, LogLevel::Info, LogLevel::Trace};

// One line at each level, as the library logs them, each naming the line
// of its call (a TRACE line starts with file:line: they must agree).
void logEveryLevel() {
  NCCL_DCP_LOG(LogLevel::Version, "a line at %s from line %d", "VERSION", __LINE__);
  WARN("a line at %s from line %d", "WARN", __LINE__);
  INFO("a line at %s from line %d", "INFO", __LINE__);
  TRACE("a line at %s from line %d", "TRACE", __LINE__);
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// This machine's name as the log writes it: up to the first dot.
std::string shortHostName() {
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  std::string h = host;
  return h.substr(0, h.find('.'));
}

class Log : public testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dcp_unit_log_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }

  // Runs logEveryLevel in a child process under e, its stdout going to
  // stdout_; returns the child's pid (0 on failure).
  pid_t logInChild(const Env& e) {
    stdout_ = dir_ + "/stdout.txt";
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(stdout_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(3);
      static Env env;
      env = e;
      setEnvForTesting(&env);
      logEveryLevel();
      fflush(nullptr);
      _exit(0);
    }
    int status = 0;
    EXPECT_GT(pid, 0) << "fork failed";
    if (pid <= 0) return 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the logging child ended with status " << status;
    return pid;
  }

  // Whether `line` is the line at `level` the child `pid` wrote, in the
  // format host:pid:tid [dev] NCCL-DCP LEVEL message; a TRACE line names
  // the file and line of its call before the message.
  static bool isLineAt(const std::string& line, LogLevel level, pid_t pid) {
    const std::string name = logLevelName(level);
    const std::string prefix = shortHostName() + ":" + std::to_string(pid) + ":[0-9]+ \\[-?[0-9]+\\] NCCL-DCP " + name;
    if (level == LogLevel::Trace)
      return std::regex_match(line, std::regex(prefix + " test_log\\.cc:([0-9]+) a line at TRACE from line \\1"));
    return std::regex_match(line, std::regex(prefix + " a line at " + name + " from line [0-9]+"));
  }

  std::string dir_, stdout_;
};

// Every level prints its own lines and those of the levels below it, and
// nothing else: VERSION hides WARN, WARN hides INFO, INFO hides TRACE;
// NONE (the default) prints nothing. Without NCCL_DCP_DEBUG_FILE, on stdout.
class LogLevels : public Log, public testing::WithParamInterface<LogLevel> {};

TEST_P(LogLevels, PrintTheirLinesAndThoseBelow) {
  Env e;
  e.debug = GetParam();
  const pid_t pid = logInChild(e);
  ASSERT_GT(pid, 0);
  const std::vector<std::string> lines = linesOf(readFile(stdout_));
  std::vector<LogLevel> want;
  for (LogLevel l : kLevels)
    if (l <= GetParam()) want.push_back(l);
  ASSERT_EQ(lines.size(), want.size()) << readFile(stdout_);
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_TRUE(isLineAt(lines[i], want[i], pid)) << "want the " << logLevelName(want[i]) << " line, got: " << lines[i];
}

INSTANTIATE_TEST_SUITE_P(EveryLevel, LogLevels,
                         testing::Values(LogLevel::None, LogLevel::Version, LogLevel::Warn, LogLevel::Info,
                                         LogLevel::Trace),
                         [](const testing::TestParamInfo<LogLevel>& i) { return std::string(logLevelName(i.param)); });

using LogFile = Log;

// NCCL_DCP_DEBUG_FILE: the lines go to that file, %h and %p replaced by the
// host name and the pid, and none to stdout.
TEST_F(LogFile, LinesGoToTheFileNamedWithHostAndPid) {
  Env e;
  e.debug = LogLevel::Info;
  e.debugFile = dir_ + "/dcp.%h.%p.log";
  const pid_t pid = logInChild(e);
  ASSERT_GT(pid, 0);
  const std::string path = dir_ + "/dcp." + shortHostName() + "." + std::to_string(pid) + ".log";
  const std::vector<std::string> lines = linesOf(readFile(path));
  ASSERT_EQ(lines.size(), 3u) << "in " << path << ": " << readFile(path) << "\nstdout: " << readFile(stdout_);
  EXPECT_TRUE(isLineAt(lines[0], LogLevel::Version, pid)) << lines[0];
  EXPECT_TRUE(isLineAt(lines[1], LogLevel::Warn, pid)) << lines[1];
  EXPECT_TRUE(isLineAt(lines[2], LogLevel::Info, pid)) << lines[2];
  EXPECT_EQ(readFile(stdout_), "") << "lines went to stdout as well";
}

// Other % sequences are kept as they are.
TEST_F(LogFile, OtherPercentSequencesAreKept) {
  Env e;
  e.debug = LogLevel::Warn;
  e.debugFile = dir_ + "/a%xb%";
  ASSERT_GT(logInChild(e), 0);
  EXPECT_EQ(linesOf(readFile(dir_ + "/a%xb%")).size(), 2u);
  EXPECT_EQ(readFile(stdout_), "");
}

// A file that cannot be opened: the lines go to stdout, none are lost.
TEST_F(LogFile, UnopenableFileFallsBackToStdout) {
  Env e;
  e.debug = LogLevel::Trace;
  e.debugFile = dir_ + "/no/such/dir/dcp.log";
  const pid_t pid = logInChild(e);
  ASSERT_GT(pid, 0);
  const std::vector<std::string> lines = linesOf(readFile(stdout_));
  ASSERT_EQ(lines.size(), 4u) << readFile(stdout_);
  EXPECT_TRUE(isLineAt(lines[3], LogLevel::Trace, pid)) << lines[3];
}

}  // namespace
}  // namespace test
}  // namespace nccl_dcp
