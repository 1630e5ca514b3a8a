// Probe (run on a GPU machine, one GPU is enough): what a CUDA IPC importer
// sees when the exporter frees the allocation before the importer closes
// it -- the order a cuda-ipc context's local destroy can produce. The
// exporter (parent) writes a pattern, hands the handle to a child process,
// frees the memory once the child has mapped it, and allocates over it;
// the child then reads and writes through its mapping and closes it.
// Prints what each step returned. Build: nvcc -o ipc_free_probe ipc_free_probe.cc
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#define REPORT(what, call)                                                          \
  do {                                                                              \
    const cudaError_t e_ = (call);                                                  \
    printf("%s: %s: %s\n", who, what, cudaGetErrorString(e_));                       \
    fflush(stdout);                                                                 \
  } while (0)

int main() {
  int toChild[2], toParent[2];
  if (pipe(toChild) || pipe(toParent)) return 2;
  const size_t bytes = 64 << 20;
  const pid_t pid = fork();  // before any CUDA call: each process has its own context
  if (pid == 0) {
    const char* who = "importer";
    cudaIpcMemHandle_t h;
    if (read(toChild[0], &h, sizeof(h)) != sizeof(h)) return 2;
    void* p = nullptr;
    REPORT("cudaIpcOpenMemHandle", cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    char ok = 1;
    if (write(toParent[1], &ok, 1) != 1) return 2;
    if (read(toChild[0], &ok, 1) != 1) return 2;  // the exporter has freed and reallocated
    std::vector<unsigned> v(4);
    REPORT("read after the exporter's cudaFree", cudaMemcpy(v.data(), p, 16, cudaMemcpyDeviceToHost));
    printf("importer: first words %08x %08x (the exporter wrote 5a5a5a5a)\n", v[0], v[1]);
    REPORT("write after the exporter's cudaFree", cudaMemset(p, 0x77, bytes));
    REPORT("cudaDeviceSynchronize", cudaDeviceSynchronize());
    REPORT("cudaIpcCloseMemHandle", cudaIpcCloseMemHandle(p));
    if (write(toParent[1], &ok, 1) != 1) return 2;
    return 0;
  }
  const char* who = "exporter";
  void* p = nullptr;
  REPORT("cudaMalloc", cudaMalloc(&p, bytes));
  REPORT("cudaMemset 0x5a", cudaMemset(p, 0x5a, bytes));
  cudaIpcMemHandle_t h;
  REPORT("cudaIpcGetMemHandle", cudaIpcGetMemHandle(&h, p));
  if (write(toChild[1], &h, sizeof(h)) != sizeof(h)) return 2;
  char ok;
  if (read(toParent[0], &ok, 1) != 1) return 2;
  REPORT("cudaFree while the importer maps it", cudaFree(p));
  void* q = nullptr;
  REPORT("cudaMalloc over it", cudaMalloc(&q, bytes));
  REPORT("cudaMemset 0x11 of the new allocation", cudaMemset(q, 0x11, bytes));
  if (write(toChild[1], &ok, 1) != 1) return 2;
  if (read(toParent[0], &ok, 1) != 1) return 2;
  std::vector<unsigned> v(4);
  REPORT("read the new allocation", cudaMemcpy(v.data(), q, 16, cudaMemcpyDeviceToHost));
  printf("exporter: new allocation's first words %08x %08x (11111111 unless the importer's writes reached it)\n", v[0],
         v[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("importer exit status %d\n", WEXITSTATUS(status));
  return 0;
}
