#include "report_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nccl_dcp {
namespace plugin {

std::string shortHostName() {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  if (char* dot = strchr(host, '.')) *dot = '\0';
  return host;
}

namespace {

// 0, or the errno of the first failure.
int writeAll(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += n;
  }
  return 0;
}

// Mode 0644 (mkstemp made it 0600), the text, close: 0 or the first errno.
int fill(int fd, const std::vector<const std::string*>& parts) {
  int err = fchmod(fd, 0644) == 0 ? 0 : errno;
  for (size_t i = 0; err == 0 && i < parts.size(); i++) err = writeAll(fd, *parts[i]);
  if (close(fd) != 0 && err == 0) err = errno;
  return err;
}

std::string errorText(const char* what, int err) { return std::string(what) + ": " + strerror(err); }

}  // namespace

// NCCL's expansion of NCCL_DEBUG_FILE (src/misc/debug.cc), %% included.
// The plugin links nothing of the library, so it keeps its own copy of
// what src/log.cc does for NCCL_DCP_DEBUG_FILE.
std::string expandPath(const std::string& pattern, bool* hasPid) {
  std::string out;
  if (hasPid) *hasPid = false;
  for (size_t i = 0; i < pattern.size(); i++) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') out += shortHostName();
    else if (c == 'p') out += std::to_string(getpid());
    else if (c == '%') out += '%';
    else (out += '%') += c;
    if (c == 'p' && hasPid) *hasPid = true;
  }
  return out;
}

std::string reportPath(const std::string& pattern) {
  bool hasPid = false;
  const std::string path = expandPath(pattern, &hasPid);
  const size_t name = path.rfind('/') + 1;  // npos + 1 == 0
  if (hasPid || name == path.size()) return path;  // a directory: replaceFile refuses it
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || dot <= name) dot = path.size();
  return path.substr(0, dot) + "." + std::to_string(getpid()) + path.substr(dot);
}

// lstat first, to refuse a link or a special file with a clear reason. A
// link planted between the check and rename() is only replaced: rename
// never follows the name it replaces.
bool replaceFile(const std::string& path, const std::vector<const std::string*>& parts, std::string* why) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    *why = S_ISLNK(st.st_mode) ? "a symbolic link: neither followed nor replaced"
                               : "not a regular file: not replaced";
    return false;
  }
  const size_t name = path.rfind('/') + 1;
  std::string tmp = path.substr(0, name) + "." + path.substr(name) + ".XXXXXX";  // hidden from *.json globs
  const int fd = mkostemp(&tmp[0], O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *why = errorText("cannot create a temporary file beside it", errno);
    return false;
  }
  int err = fill(fd, parts);
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err == 0) return true;
  *why = errorText("cannot write it", err);
  unlink(tmp.c_str());
  return false;
}

}  // namespace plugin
}  // namespace nccl_dcp
