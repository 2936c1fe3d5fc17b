// The driver double's state: devices, contexts, streams, pools and the bytes each device holds.
// See Note [Why a driver double] in driver_double.h.
#include "driver_double.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "oomharness/units.h"

namespace cuda_double {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Reads a size variable (CUDA_DOUBLE_MEMORY, CUDA_DOUBLE_CONTEXT_MEMORY; CUDA_DOUBLE_DEVICES below). A bad
// value is reported on stderr (the only place a driver can say why) and makes cuInit fail, rather than
// silently running with a default.
bool read_size(const char* name, uint64_t fallback, uint64_t& out) {
  const char* text = std::getenv(name);
  if (!text || !*text) {
    out = fallback;
    return true;
  }
  oomh::Expected<double> r = oomh::parse_bytes(text);
  if (!r) {
    std::fprintf(stderr, "cuda double: %s: %s\n", name, r.error().str().c_str());
    return false;
  }
  out = static_cast<uint64_t>(*r);
  return true;
}

bool read_devices(int& out) {
  const char* text = std::getenv("CUDA_DOUBLE_DEVICES");
  if (!text || !*text) {
    out = 1;
    return true;
  }
  char* end = nullptr;
  long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 0 || n > kMaxDevices) {
    std::fprintf(stderr, "cuda double: CUDA_DOUBLE_DEVICES: bad device count '%s' (write a number from 0 to %d)\n",
                 text, kMaxDevices);
    return false;
  }
  out = static_cast<int>(n);
  return true;
}

// Host memory that stands for device memory: reserved, never touched, so large sizes cost nothing.
void* map_memory(size_t bytes, bool low) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (low) {
#ifdef MAP_32BIT
    flags |= MAP_32BIT;
#else
    return nullptr;
#endif
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

bool is_special_stream(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

}  // namespace

namespace {
constinit thread_local ContextStack t_context_stack;  // trivially destructible: no guard on access
}  // namespace

ContextStack& context_stack() { return t_context_stack; }

std::vector<Context*>& ContextStack::below() {
  thread_local std::vector<Context*> contexts;
  return contexts;
}

void ContextStack::push(Context* c) {
  if (top_) below().push_back(top_);
  top_ = c;
}

void ContextStack::pop() {
  if (!top_) return;
  std::vector<Context*>& rest = below();
  if (rest.empty()) {
    top_ = nullptr;
  } else {
    top_ = rest.back();
    rest.pop_back();
  }
}

void ContextStack::set_top(Context* c) {
  if (!c) pop();
  else top_ = c;
}

void ContextStack::remove(Context* c) {
  std::erase(below(), c);
  if (top_ == c) pop();
}

Driver& Driver::get() {
  static Driver* driver = new Driver();  // never destroyed: entry points may run during exit
  return *driver;
}

CUresult Driver::init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  if (initialized_.load(std::memory_order_relaxed)) return CUDA_SUCCESS;
  uint64_t memory = 0;
  int devices = 0;
  if (!read_size("CUDA_DOUBLE_MEMORY", uint64_t{8} << 30, memory) || !read_devices(devices) ||
      !read_size("CUDA_DOUBLE_CONTEXT_MEMORY", 0, context_memory_) ||
      !read_size("CUDA_DOUBLE_HOST_MEMORY", uint64_t{64} << 30, host_limit_))
    return CUDA_ERROR_INVALID_VALUE;
  if (devices == 0) return CUDA_ERROR_NO_DEVICE;
  total_memory_ = memory;
  device_count_ = devices;
  used_.assign(static_cast<size_t>(devices), 0);
  for (int d = 0; d < devices; ++d) {
    primaries_[static_cast<size_t>(d)] = Context{d, true};
    default_pools_[static_cast<size_t>(d)] = Pool{d, true};
  }
  initialized_.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

bool Driver::initialized() const { return initialized_.load(std::memory_order_acquire); }

// --- contexts -------------------------------------------------------------------------------------------

Context* Driver::primary_context(CUdevice d) { return &primaries_[static_cast<size_t>(d)]; }

CUresult Driver::retain_primary(CUdevice d, CUcontext* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(mu_);
  if (primary_refs_[static_cast<size_t>(d)] == 0)
    if (CUresult r = add_context(d); r != CUDA_SUCCESS) return r;
  ++primary_refs_[static_cast<size_t>(d)];
  *out = reinterpret_cast<CUcontext>(primary_context(d));
  return CUDA_SUCCESS;
}

CUresult Driver::release_primary(CUdevice d) {
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(mu_);
  int& refs = primary_refs_[static_cast<size_t>(d)];
  if (refs == 0) return CUDA_ERROR_INVALID_CONTEXT;  // released more often than retained
  if (--refs == 0) drop_context(d);
  return CUDA_SUCCESS;
}

// Like the driver, a reset destroys what the primary context allocated: the device's cuMemAlloc-style
// allocations go back. Memory from cuMemCreate belongs to its handle and stays until cuMemRelease.
CUresult Driver::reset_primary(CUdevice d) {
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(mu_);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.device == d) {
      munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
      used_[static_cast<size_t>(d)] -= it->second.size;
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  if (primary_refs_[static_cast<size_t>(d)] != 0) drop_context(d);
  primary_refs_[static_cast<size_t>(d)] = 0;
  return CUDA_SUCCESS;
}

CUresult Driver::primary_state(CUdevice d, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(mu_);
  *flags = 0;
  *active = primary_refs_[static_cast<size_t>(d)] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult Driver::create_context(CUdevice d, CUcontext* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  auto* ctx = new Context{d, false};
  {
    std::lock_guard lock(mu_);
    if (CUresult r = add_context(d); r != CUDA_SUCCESS) {
      delete ctx;
      return r;
    }
    contexts_.insert(ctx);
  }
  context_stack().push(ctx);  // cuCtxCreate makes the new context current
  *out = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult Driver::destroy_context(CUcontext handle) {
  auto* ctx = reinterpret_cast<Context*>(handle);
  {
    std::lock_guard lock(mu_);
    if (!contexts_.erase(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    drop_context(ctx->device);
  }
  context_stack().remove(ctx);
  delete ctx;
  return CUDA_SUCCESS;
}

bool Driver::valid_created_context(Context* ctx) {
  std::lock_guard lock(mu_);
  return contexts_.count(ctx) != 0;
}

CUresult Driver::current_device(int& device) {
  Context* current = context_stack().top();
  if (!current || !valid_context(reinterpret_cast<CUcontext>(current))) return CUDA_ERROR_INVALID_CONTEXT;
  device = current->device;
  return CUDA_SUCCESS;
}

// --- streams and pools ----------------------------------------------------------------------------------

CUresult Driver::create_stream(CUstream* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Context* current = context_stack().top();
  if (!current) return CUDA_ERROR_INVALID_CONTEXT;
  auto* s = new Stream{current};
  std::lock_guard lock(mu_);
  streams_.insert(s);
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult Driver::destroy_stream(CUstream handle) {
  auto* s = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(mu_);
  if (!streams_.erase(s)) return CUDA_ERROR_INVALID_HANDLE;
  delete s;
  return CUDA_SUCCESS;
}

CUresult Driver::stream_device(CUstream handle, int& device) {
  if (is_special_stream(handle)) return current_device(device);
  auto* s = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(mu_);
  if (!streams_.count(s)) return CUDA_ERROR_INVALID_HANDLE;
  device = s->context->device;
  return CUDA_SUCCESS;
}

CUresult Driver::default_pool(CUdevice d, CUmemoryPool* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  *out = reinterpret_cast<CUmemoryPool>(&default_pools_[static_cast<size_t>(d)]);
  return CUDA_SUCCESS;
}

CUresult Driver::create_pool(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  auto* pool = new Pool{props->location.id, false};
  std::lock_guard lock(mu_);
  pools_.insert(pool);
  *out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}

CUresult Driver::destroy_pool(CUmemoryPool handle) {
  auto* pool = reinterpret_cast<Pool*>(handle);
  std::lock_guard lock(mu_);
  if (!pools_.erase(pool)) return CUDA_ERROR_INVALID_VALUE;  // unknown, or a device's default pool
  delete pool;
  return CUDA_SUCCESS;
}

CUresult Driver::pool_device(CUmemoryPool handle, int& device) {
  auto* pool = reinterpret_cast<Pool*>(handle);
  if (pool >= default_pools_.data() && pool < default_pools_.data() + device_count_) {
    device = pool->device;
    return CUDA_SUCCESS;
  }
  std::lock_guard lock(mu_);
  if (!pools_.count(pool)) return CUDA_ERROR_INVALID_VALUE;
  device = pool->device;
  return CUDA_SUCCESS;
}

// --- memory ---------------------------------------------------------------------------------------------

CUresult Driver::charge(int device, size_t bytes) {
  if (device < 0) {  // pinned host memory
    if (bytes > host_limit_ - host_used_) return CUDA_ERROR_OUT_OF_MEMORY;
    host_used_ += bytes;
    return CUDA_SUCCESS;
  }
  uint64_t& used = used_[static_cast<size_t>(device)];
  if (bytes > total_memory_ - used) return CUDA_ERROR_OUT_OF_MEMORY;
  used += bytes;
  return CUDA_SUCCESS;
}

void Driver::refund(int device, size_t bytes) {
  if (device < 0) host_used_ -= bytes;
  else used_[static_cast<size_t>(device)] -= bytes;
}

CUresult Driver::host_alloc(size_t bytes, void** out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(mu_);
    if (CUresult r = charge(-1, bytes); r != CUDA_SUCCESS) return r;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  std::lock_guard lock(mu_);
  if (p == MAP_FAILED) {
    refund(-1, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  host_allocations_[reinterpret_cast<uintptr_t>(p)] = bytes;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult Driver::host_free(void* p) {
  std::lock_guard lock(mu_);
  auto it = host_allocations_.find(reinterpret_cast<uintptr_t>(p));
  if (it == host_allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second);
  refund(-1, it->second);
  host_allocations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Driver::host_register(void* p, size_t bytes) {
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  auto key = reinterpret_cast<uintptr_t>(p);
  if (host_registered_.count(key)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (CUresult r = charge(-1, bytes); r != CUDA_SUCCESS) return r;
  host_registered_[key] = bytes;
  return CUDA_SUCCESS;
}

CUresult Driver::host_unregister(void* p) {
  std::lock_guard lock(mu_);
  auto it = host_registered_.find(reinterpret_cast<uintptr_t>(p));
  if (it == host_registered_.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  refund(-1, it->second);
  host_registered_.erase(it);
  return CUDA_SUCCESS;
}

uint64_t Driver::host_used() {
  std::lock_guard lock(mu_);
  return host_used_;
}

// Under mu_. The first context of a device takes its memory; like the driver, creating it fails with
// CUDA_ERROR_OUT_OF_MEMORY when the device has no room for it.
CUresult Driver::add_context(int device) {
  int& live = live_contexts_[static_cast<size_t>(device)];
  if (live == 0)
    if (CUresult r = charge(device, context_memory_); r != CUDA_SUCCESS) return r;
  ++live;
  return CUDA_SUCCESS;
}

void Driver::drop_context(int device) {
  int& live = live_contexts_[static_cast<size_t>(device)];
  if (live > 0 && --live == 0) refund(device, context_memory_);
}

uint64_t Driver::used(int device) {
  std::lock_guard lock(mu_);
  return initialized_ && valid_device(device) ? used_[static_cast<size_t>(device)] : 0;
}

CUresult Driver::allocate(int device, size_t bytes, CUdeviceptr* out, bool low) {
  if (!out || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (bytes > SIZE_MAX - kAllocationRounding) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t size = round_up(bytes, kAllocationRounding);
  {
    std::lock_guard lock(mu_);
    if (CUresult r = charge(device, size); r != CUDA_SUCCESS) return r;
  }
  void* p = map_memory(size, low);
  std::lock_guard lock(mu_);
  if (!p) {
    refund(device, size);  // the host could not back it: to the program, the device is full
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto ptr = reinterpret_cast<CUdeviceptr>(p);
  allocations_[ptr] = Allocation{size, size, device};
  *out = ptr;
  return CUDA_SUCCESS;
}

CUresult Driver::free(CUdeviceptr ptr) {
  Allocation a;
  {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
    allocations_.erase(it);
    refund(a.device, a.size);
  }
  munmap(reinterpret_cast<void*>(ptr), a.mapped);
  return CUDA_SUCCESS;
}

CUresult Driver::memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  *total_bytes = total_memory_;
  *free_bytes = total_memory_ - used_[static_cast<size_t>(device)];
  return CUDA_SUCCESS;
}

bool Driver::addressable(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard lock(mu_);
  auto a = allocations_.upper_bound(ptr);
  if (a != allocations_.begin()) {
    --a;
    if (ptr - a->first <= a->second.size && bytes <= a->second.size - (ptr - a->first)) return true;
  }
  auto m = mappings_.upper_bound(ptr);
  if (m != mappings_.begin()) {
    --m;
    if (m->second.accessible && ptr - m->first <= m->second.size && bytes <= m->second.size - (ptr - m->first))
      return true;
  }
  return false;
}

// --- virtual memory management --------------------------------------------------------------------------

CUresult Driver::create_physical(CUmemGenericAllocationHandle* out, size_t size, const CUmemAllocationProp* prop) {
  if (!out || !prop || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE && !host))
    return CUDA_ERROR_INVALID_VALUE;
  int device = host ? -1 : prop->location.id;
  if (!host && !valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  {
    std::lock_guard lock(mu_);
    if (CUresult r = charge(device, size); r != CUDA_SUCCESS) return r;
  }
  int fd = memfd_create("cuda-double-physical", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    fd = -1;
  }
  std::lock_guard lock(mu_);
  if (fd < 0) {
    refund(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUmemGenericAllocationHandle h = next_handle_++;
  physical_[h] = PhysicalMemory{size, device, fd, 0, false};
  *out = h;
  return CUDA_SUCCESS;
}

void Driver::drop_physical_if_unused(CUmemGenericAllocationHandle handle) {
  auto it = physical_.find(handle);
  if (it == physical_.end() || !it->second.released || it->second.mappings > 0) return;
  close(it->second.fd);
  refund(it->second.device, it->second.size);
  physical_.erase(it);
}

// The memory goes back only once the handle is released and no mapping uses it any more, as documented
// for cuMemRelease.
CUresult Driver::release_physical(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  drop_physical_if_unused(handle);
  return CUDA_SUCCESS;
}

CUresult Driver::reserve_address(CUdeviceptr* out, size_t size, size_t alignment) {
  if (!out || size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kVmmGranularity;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  // Over-reserve, then trim, so that the start is aligned as the driver's reservations are.
  size_t span = size + alignment;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto base = reinterpret_cast<uintptr_t>(p);
  uintptr_t start = round_up(base, alignment);
  if (start > base) munmap(p, start - base);
  if (base + span > start + size) munmap(reinterpret_cast<void*>(start + size), base + span - (start + size));
  std::lock_guard lock(mu_);
  reservations_[start] = size;
  *out = start;
  return CUDA_SUCCESS;
}

CUresult Driver::free_address(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = mappings_.lower_bound(ptr);
  if (m != mappings_.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void*>(ptr), size);
  reservations_.erase(it);
  return CUDA_SUCCESS;
}

bool Driver::inside_reservation(CUdeviceptr ptr, size_t size) const {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return false;
  --it;
  return ptr - it->first <= it->second && size <= it->second - (ptr - it->first);
}

CUresult Driver::map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle) {
  if (size == 0 || size % kVmmGranularity != 0 || offset % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mu_);
  auto ph = physical_.find(handle);
  if (ph == physical_.end() || ph->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > ph->second.size || size > ph->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  if (!inside_reservation(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  auto next = mappings_.lower_bound(ptr);
  if (next != mappings_.end() && next->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second.size > ptr)
    return CUDA_ERROR_ALREADY_MAPPED;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->second.fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++ph->second.mappings;
  mappings_[ptr] = Mapping{size, handle, false};
  return CUDA_SUCCESS;
}

// Unmaps every mapping in [ptr, ptr + size); the range must start at a mapping and cover whole mappings.
CUresult Driver::unmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(mu_);
  auto first = mappings_.find(ptr);
  if (first == mappings_.end() || size == 0) return CUDA_ERROR_INVALID_VALUE;
  auto last = mappings_.lower_bound(ptr + size);
  for (auto it = first; it != last; ++it)
    if (it->first + it->second.size > ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = first; it != last;) {
    // Put the reservation back in place of the mapping so that the address range stays ours.
    mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    CUmemGenericAllocationHandle h = it->second.handle;
    --physical_[h].mappings;
    it = mappings_.erase(it);
    drop_physical_if_unused(h);
  }
  return CUDA_SUCCESS;
}

CUresult Driver::set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
  }
  std::lock_guard lock(mu_);
  // Every byte of the range must be mapped.
  CUdeviceptr at = ptr;
  for (auto it = mappings_.find(ptr); at < ptr + size; ++it) {
    if (it == mappings_.end() || it->first != at) return CUDA_ERROR_INVALID_VALUE;
    at += it->second.size;
  }
  if (at != ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = mappings_.find(ptr); it != mappings_.end() && it->first < ptr + size; ++it)
    it->second.accessible = prot != PROT_NONE;
  return CUDA_SUCCESS;
}

}  // namespace cuda_double
