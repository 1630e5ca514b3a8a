/*************************************************************************
 * Where the JSON report goes and how it gets there. The plugin runs in
 * other people's jobs, often one process per GPU, so:
 * - NCCL_DCP_PROFILE_FILE is expanded as NCCL expands NCCL_DEBUG_FILE
 *   (%h short host name, %p pid, %% a '%'), and a pattern without %p gets
 *   the pid anyway: ranks never share one file;
 * - a report written whole replaces the last one atomically (a fresh
 *   temporary file beside it, renamed over it: replaceFile); a finalize
 *   that only adds its communicator rewrites the file's end in place
 *   (rewriteTail), which is not atomic: a reader during it, or a process
 *   killed in it, can see a torn report;
 * - nothing that is not a regular file is written through or replaced: a
 *   symbolic link (planted or not), a FIFO, a device, /dev/null.
 ************************************************************************/
#ifndef NCCL_DCP_PLUGIN_REPORT_FILE_H_
#define NCCL_DCP_PLUGIN_REPORT_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nccl_dcp {
namespace plugin {

// The host name up to its first '.', as NCCL's %h.
std::string shortHostName();
// `pattern` with %h -> short host name, %p -> pid, %% -> %; any other
// %x is kept as it is (as NCCL_DEBUG_FILE). *hasPid: a %p was expanded.
std::string expandPath(const std::string& pattern, bool* hasPid = nullptr);
// The report's path for this process: expandPath(pattern), plus
// ".<pid>" before the file name's extension (after its last '.', a leading
// dot not counting; at the end if it has none) when the pattern has no %p:
// "dcp.json" -> "dcp.<pid>.json", "dcp" -> "dcp.<pid>".
std::string reportPath(const std::string& pattern);

// A file as the plugin last wrote it: its inode and size.
struct WrittenFile {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
};

// Replaces the file `path` with `parts`, concatenated, mode 0644: written
// to a new file that mkstemp creates beside it (never through a link),
// then renamed over it. False with *why when `path` exists and is no
// regular file (a symbolic link above all: it is neither followed nor
// replaced) or when any step fails; the temporary file is then removed.
// *written (optional): the new file.
bool replaceFile(const std::string& path, const std::vector<const std::string*>& parts, std::string* why,
                 WrittenFile* written = nullptr);

// Rewrites the end of the file `path` in place: `text` at offset `at`,
// the file cut to at + text.size(). Not atomic: until it returns, the file
// can hold part of `text` over the old end (or the old end past the new
// one), which is no JSON. Only while `path` is still the
// regular file the plugin wrote last (`expected`: same inode, same size);
// opened O_NOFOLLOW and checked again with fstat. False with *why empty
// when it is not (gone, replaced, grown: the caller writes it whole); false
// with *why when `path` is no regular file or a step fails.
bool rewriteTail(const std::string& path, const WrittenFile& expected, off_t at, const std::string& text,
                 WrittenFile* written, std::string* why);

// Whole files written (replaceFile) and bytes written (both), since the
// process began: the tests' measure of the report's I/O.
uint64_t filesReplaced();
uint64_t bytesWritten();

}  // namespace plugin
}  // namespace nccl_dcp

#endif  // NCCL_DCP_PLUGIN_REPORT_FILE_H_
