// oomh-reserve: holds real device memory for a job (`memory.reserve`), so that the job's real
// allocations meet a GPU that is already partly full, as they would next to a neighbour.
//
//   oomh-reserve --device D (--bytes N | --leave F) [--chunk C [--fragment]]
//
// --leave F holds whatever leaves F bytes free on the device, measured (cuMemGetInfo) once the sidecar's
// own CUDA context exists: a sidecar started with the free memory minus F, measured before, would leave F
// minus its context (about 0.5 GiB on an H100) free. Prints `READY <bytes held>` on stdout once the memory
// is held, then waits until stdin closes or
// SIGTERM/SIGINT arrives, frees everything and exits 0. On failure prints `ERROR <message>` and exits 1.
//
// The driver is resolved at run time (dlopen("libcuda.so.1"), then cuGetProcAddress_v2 or dlsym) like the
// shim does, so the same program works on a GPU and over the CPU driver double (LD_LIBRARY_PATH).
//
// --chunk C holds the reservation in pieces of C bytes. --fragment also leaves a hole after each piece:
// it allocates 2·N in pieces of C and frees every other one, so N stays held with free gaps between the
// pieces, none of them larger than C (the fragmented GPU that makes a large allocation fail although
// the free total would be enough).

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include "oomharness/units.h"

namespace {

using PFN_cuGetProcAddress_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using PFN_cuInit = CUresult (*)(unsigned int);
using PFN_cuDeviceGet = CUresult (*)(CUdevice*, int);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext*, CUdevice);
using PFN_cuDevicePrimaryCtxRelease = CUresult (*)(CUdevice);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext);
using PFN_cuMemAlloc = CUresult (*)(CUdeviceptr*, size_t);
using PFN_cuMemFree = CUresult (*)(CUdeviceptr);
using PFN_cuGetErrorString = CUresult (*)(CUresult, const char**);
using PFN_cuMemGetInfo = CUresult (*)(size_t*, size_t*);

struct Driver {
  void* lib = nullptr;
  PFN_cuGetProcAddress_v2 get_proc = nullptr;
  PFN_cuInit init = nullptr;
  PFN_cuDeviceGet device_get = nullptr;
  PFN_cuDevicePrimaryCtxRetain retain = nullptr;
  PFN_cuDevicePrimaryCtxRelease release = nullptr;
  PFN_cuCtxSetCurrent set_current = nullptr;
  PFN_cuMemAlloc alloc = nullptr;
  PFN_cuMemFree free = nullptr;
  PFN_cuGetErrorString error_string = nullptr;
  PFN_cuMemGetInfo mem_info = nullptr;
};

volatile sig_atomic_t g_stop = 0;
int g_wake[2] = {-1, -1};

void on_signal(int) {
  int saved = errno;
  g_stop = 1;
  char c = 1;
  ssize_t w = write(g_wake[1], &c, 1);
  (void)w;
  errno = saved;
}

[[noreturn]] void fail(const std::string& message) {
  std::printf("ERROR %s\n", message.c_str());
  std::fflush(stdout);
  std::exit(1);
}

// A driver entry point by its base name: cuGetProcAddress_v2 first (what the runtime uses), then the
// exported symbol `versioned` (the _v2 names) with dlsym.
void* resolve(Driver& d, const char* base, const char* versioned) {
  void* fn = nullptr;
  if (d.get_proc) {
    CUdriverProcAddressQueryResult status{};
    if (d.get_proc(base, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS && fn) return fn;
    fn = nullptr;
  }
  fn = dlsym(d.lib, versioned);
  return fn;
}

std::string cu_error(const Driver& d, CUresult r) {
  const char* text = nullptr;
  if (d.error_string) d.error_string(r, &text);
  return std::string(text ? text : "unknown error") + " (" + std::to_string(static_cast<int>(r)) + ")";
}

Driver load_driver() {
  Driver d;
  d.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) fail(std::string("cannot load the CUDA driver libcuda.so.1: ") + dlerror());
  d.get_proc = reinterpret_cast<PFN_cuGetProcAddress_v2>(dlsym(d.lib, "cuGetProcAddress_v2"));
  d.init = reinterpret_cast<PFN_cuInit>(resolve(d, "cuInit", "cuInit"));
  d.device_get = reinterpret_cast<PFN_cuDeviceGet>(resolve(d, "cuDeviceGet", "cuDeviceGet"));
  d.retain = reinterpret_cast<PFN_cuDevicePrimaryCtxRetain>(resolve(d, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain"));
  d.release = reinterpret_cast<PFN_cuDevicePrimaryCtxRelease>(resolve(d, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"));
  d.set_current = reinterpret_cast<PFN_cuCtxSetCurrent>(resolve(d, "cuCtxSetCurrent", "cuCtxSetCurrent"));
  d.alloc = reinterpret_cast<PFN_cuMemAlloc>(resolve(d, "cuMemAlloc", "cuMemAlloc_v2"));
  d.free = reinterpret_cast<PFN_cuMemFree>(resolve(d, "cuMemFree", "cuMemFree_v2"));
  d.error_string = reinterpret_cast<PFN_cuGetErrorString>(resolve(d, "cuGetErrorString", "cuGetErrorString"));
  d.mem_info = reinterpret_cast<PFN_cuMemGetInfo>(resolve(d, "cuMemGetInfo", "cuMemGetInfo_v2"));
  const char* missing = !d.init ? "cuInit" : !d.device_get ? "cuDeviceGet" : !d.retain ? "cuDevicePrimaryCtxRetain"
                      : !d.release ? "cuDevicePrimaryCtxRelease" : !d.set_current ? "cuCtxSetCurrent"
                      : !d.alloc ? "cuMemAlloc" : !d.free ? "cuMemFree" : nullptr;
  if (missing) fail(std::string("the CUDA driver has no ") + missing);
  return d;
}

uint64_t parse_size(const char* flag, const char* value) {
  oomh::Expected<double> r = oomh::parse_bytes(value ? value : "");
  if (!r) fail(std::string(flag) + ": " + r.error().str());
  return static_cast<uint64_t>(*r);
}

// Waits until stdin reaches end of file (the runner closed it) or a stop signal arrives.
void wait_for_stop() {
  while (!g_stop) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_wake[0], POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) return;
    if (fds[0].revents & POLLIN) {
      char buf[256];
      ssize_t r = read(STDIN_FILENO, buf, sizeof buf);
      if (r <= 0) return;  // end of file (or an error): the runner is done with us
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  uint64_t bytes = 0, chunk = 0, leave = 0;
  bool fragment = false, leaving = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--device" && next) device = std::atoi(argv[++i]);
    else if (a == "--bytes" && next) bytes = parse_size("--bytes", argv[++i]);
    else if (a == "--leave" && next) {
      leave = parse_size("--leave", argv[++i]);
      leaving = true;
    }
    else if (a == "--chunk" && next) chunk = parse_size("--chunk", argv[++i]);
    else if (a == "--fragment") fragment = true;
    else if (a == "--help" || a == "-h") {
      std::printf("usage: oomh-reserve --device D (--bytes N | --leave F) [--chunk C [--fragment]]\n");
      return 0;
    } else fail("unknown or incomplete argument '" + a + "' (usage: oomh-reserve --device D (--bytes N | --leave F) [--chunk C [--fragment]])");
  }
  if (leaving && bytes != 0) fail("give --bytes or --leave, not both");
  if (!leaving && bytes == 0) fail("--bytes must be given and greater than 0 (or --leave)");
  if (fragment && chunk == 0) fail("--fragment needs --chunk");

  if (pipe(g_wake) != 0) fail(std::string("pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Driver d = load_driver();
  CUresult r = d.init(0);
  if (r != CUDA_SUCCESS) fail("cuInit failed: " + cu_error(d, r));
  CUdevice dev = 0;
  if ((r = d.device_get(&dev, device)) != CUDA_SUCCESS) fail("cuDeviceGet(" + std::to_string(device) + ") failed: " + cu_error(d, r));
  CUcontext ctx = nullptr;
  if ((r = d.retain(&ctx, dev)) != CUDA_SUCCESS) fail("cuDevicePrimaryCtxRetain failed: " + cu_error(d, r));
  if ((r = d.set_current(ctx)) != CUDA_SUCCESS) fail("cuCtxSetCurrent failed: " + cu_error(d, r));
  if (leaving) {
    size_t free_bytes = 0, total_bytes = 0;
    if (!d.mem_info) fail("the CUDA driver has no cuMemGetInfo (needed by --leave)");
    if ((r = d.mem_info(&free_bytes, &total_bytes)) != CUDA_SUCCESS) fail("cuMemGetInfo failed: " + cu_error(d, r));
    if (free_bytes <= leave)
      fail("--leave " + oomh::format_bytes(leave) + ": only " + oomh::format_bytes(free_bytes) + " is free, nothing to hold");
    bytes = free_bytes - leave;
    if (chunk) bytes -= bytes % chunk;  // whole pieces: the last piece must not take what is left
  }

  std::vector<CUdeviceptr> held;
  auto free_all = [&] {
    for (CUdeviceptr p : held) d.free(p);
    held.clear();
    d.release(dev);
  };
  uint64_t piece = chunk ? chunk : bytes;
  uint64_t to_allocate = fragment ? 2 * bytes : bytes;
  std::vector<CUdeviceptr> all;
  for (uint64_t done = 0; done < to_allocate;) {
    uint64_t n = std::min(piece, to_allocate - done);
    CUdeviceptr p = 0;
    if ((r = d.alloc(&p, n)) != CUDA_SUCCESS) {
      for (CUdeviceptr q : all) d.free(q);
      d.release(dev);
      fail("cuMemAlloc(" + oomh::format_bytes(n) + ") failed after " + oomh::format_bytes(done) + ": " + cu_error(d, r));
    }
    all.push_back(p);
    done += n;
  }
  uint64_t held_bytes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (fragment && (i % 2 == 1)) {
      d.free(all[i]);  // the hole
      continue;
    }
    held.push_back(all[i]);
    uint64_t n = std::min(piece, to_allocate - i * piece);
    held_bytes += n;
  }

  std::printf("READY %llu\n", static_cast<unsigned long long>(held_bytes));
  std::fflush(stdout);
  wait_for_stop();
  free_all();
  return 0;
}
