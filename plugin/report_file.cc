#include "report_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

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

std::atomic<uint64_t> gFilesReplaced{0}, gBytesWritten{0};

// Why the plugin refuses to write through `st` ("" for a regular file).
const char* refusal(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "";
  return S_ISLNK(st.st_mode) ? "a symbolic link: neither followed nor replaced" : "not a regular file: not replaced";
}

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
bool replaceFile(const std::string& path, const std::vector<const std::string*>& parts, std::string* why,
                 WrittenFile* written) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    *why = refusal(st);
    return false;
  }
  const size_t name = path.rfind('/') + 1;
  std::string tmp = path.substr(0, name) + "." + path.substr(name) + ".XXXXXX";  // hidden from *.json globs
  const int fd = mkostemp(&tmp[0], O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *why = errorText("cannot create a temporary file beside it", errno);
    return false;
  }
  struct stat made;
  const bool identified = fstat(fd, &made) == 0;
  int err = fill(fd, parts);
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err == 0) {
    uint64_t bytes = 0;
    for (const std::string* part : parts) bytes += part->size();
    gFilesReplaced.fetch_add(1, std::memory_order_relaxed);
    gBytesWritten.fetch_add(bytes, std::memory_order_relaxed);
    if (written) *written = identified ? WrittenFile{made.st_dev, made.st_ino, (off_t)bytes} : WrittenFile{};
    return true;
  }
  *why = errorText("cannot write it", err);
  unlink(tmp.c_str());
  return false;
}

bool rewriteTail(const std::string& path, const WrittenFile& expected, off_t at, const std::string& text,
                 WrittenFile* written, std::string* why) {
  why->clear();
  auto same = [&](const struct stat& st) {
    return st.st_dev == expected.dev && st.st_ino == expected.ino && st.st_size == expected.size;
  };
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;  // gone: written whole
  if (*refusal(st) != '\0') {
    *why = refusal(st);
    return false;
  }
  if (!same(st) || at > expected.size) return false;
  const int fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) *why = "a symbolic link: neither followed nor replaced";  // planted since the lstat
    return false;
  }
  int err = 0;
  if (fstat(fd, &st) != 0 || !same(st)) {
    close(fd);
    return false;  // replaced since the lstat: written whole
  }
  for (size_t done = 0; err == 0 && done < text.size();) {
    const ssize_t n = pwrite(fd, text.data() + done, text.size() - done, at + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) err = n < 0 ? errno : EIO;
    else done += n;
  }
  const off_t end = at + (off_t)text.size();
  if (err == 0 && end < expected.size && ftruncate(fd, end) != 0) err = errno;
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    *why = errorText("cannot write it", err);
    return false;
  }
  gBytesWritten.fetch_add(text.size(), std::memory_order_relaxed);
  *written = {expected.dev, expected.ino, end};
  return true;
}

uint64_t filesReplaced() { return gFilesReplaced.load(std::memory_order_relaxed); }
uint64_t bytesWritten() { return gBytesWritten.load(std::memory_order_relaxed); }

}  // namespace plugin
}  // namespace nccl_dcp
