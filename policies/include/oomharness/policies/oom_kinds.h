#pragma once
// What counts as an out-of-memory failure: one table (docs/design/DESIGN.md, "An OOM is an event"; issue 27), read by
// the runner's output detector (runner/src/exec/output.cpp), the checks (graceful_exit's default message,
// the OOMs the code saw) and the findings (oom_as_other_error). Its Python twin is
// python/oomharness/oom_kinds.py, which the probe reads; tests/python/test_oom_kinds.py checks that the two
// tables agree, column by column (edit both, or that test fails).
//
// Note [Which errors are OOMs]
// Real out-of-memory failures do not all arrive as torch.OutOfMemoryError. PyTorch's caching allocator
// raises that one (c10::OutOfMemoryError, "CUDA out of memory. Tried to allocate ..."), after freeing its
// cache and retrying once. Everything that allocates device memory outside it fails its own way, at once and
// with no retry: cuBLAS creating its handle at the first matmul of a thread ("CUDA error:
// CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", a RuntimeError), cuDNN (its handle, or no
// algorithm whose workspace fits: CUDNN_STATUS_NOT_SUPPORTED), cuFFT, cuSOLVER, cuSPARSE, NCCL's buffers,
// and CUDA's own out-of-memory code reaching PyTorch through a runtime call (torch.AcceleratorError "CUDA
// error: out of memory", as with PYTORCH_NO_CUDA_MEMORY_CACHING=1). The CPU allocator's message is a host
// OOM (`memory: host`). Each row says which words of an error's message name it (lowercase substrings),
// which memory ran out, whose allocation it was, whether the code could catch it as OutOfMemoryError
// (`catchable`), and whether the words alone say so or only after the shim (or the virtual device) refused
// an allocation in the same attempt (`needs_refusal`: CUDNN_STATUS_NOT_SUPPORTED also means a non-contiguous
// input). A job's output only supports an event (Note [An OOM is an event] in trace.cpp); the loose words
// below (kLooseWords) mark a line as an OOM message for that support, never alone.

#include <array>
#include <string>
#include <string_view>

namespace oomh::oom {

struct OomKind {
  std::string_view name;                     // "cublas": the `oom_kind` of a probe `oom` event
  std::array<std::string_view, 4> words;     // lowercase substrings of the message; "" ends the list
  std::string_view memory;                   // "device" or "host"
  std::string_view source;                   // whose allocation failed, in a user's words
  bool catchable;                            // surfaces as torch.OutOfMemoryError / c10::OutOfMemoryError
  bool needs_refusal;                        // counts only after a refusal of the shim in the same attempt
  std::string_view advice;                   // what the code must catch or pre-allocate (findings)
};

// Note [Which errors are OOMs]. Order matters: the first row whose words a message holds names it.
inline constexpr OomKind kOomKinds[] = {
    {"allocator", {"cuda out of memory", "hip out of memory", "", ""}, "device", "PyTorch's caching allocator",
     true, false, ""},
    {"cublas", {"cublas_status_alloc_failed", "", "", ""}, "device", "cuBLAS (its handle or workspace)", false, false,
     "cuBLAS creates its handle at the first matmul of each thread (forward, and autograd's backward thread) outside "
     "PyTorch's allocator: run one forward and backward with a small batch before memory fills, or treat a "
     "RuntimeError naming CUBLAS_STATUS_ALLOC_FAILED as an OOM where the code catches OutOfMemoryError"},
    {"cudnn", {"cudnn_status_alloc_failed", "cudnn_status_internal_error_device_allocation_failed", "", ""}, "device",
     "cuDNN (its handle or workspace)", false, false,
     "cuDNN allocates its handle and workspaces outside PyTorch's allocator: run one convolution forward and backward "
     "before memory fills, or treat a RuntimeError naming CUDNN_STATUS_ALLOC_FAILED as an OOM where the code catches "
     "OutOfMemoryError"},
    {"cudnn_workspace", {"cudnn_status_not_supported", "", "", ""}, "device", "cuDNN (no algorithm's workspace fits)",
     false, true,
     "with memory short, cuDNN found no algorithm whose workspace fits and said CUDNN_STATUS_NOT_SUPPORTED: treat that "
     "RuntimeError as an OOM where the code catches OutOfMemoryError (Accelerate's helper does), or leave room"},
    {"cuda_runtime", {"cuda error: out of memory", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
                      "hiperroroutofmemory"},
     "device", "the CUDA runtime (an allocation outside the caching allocator)", false, false,
     "CUDA's out-of-memory code reached the code as torch.AcceleratorError (a RuntimeError), not OutOfMemoryError: "
     "catch torch.AcceleratorError whose message says 'out of memory' too, and keep PyTorch's caching allocator on "
     "(PYTORCH_NO_CUDA_MEMORY_CACHING=1 turns its OOMs into these)"},
    {"cufft", {"cufft_alloc_failed", "", "", ""}, "device", "cuFFT (its plan's workspace)", false, false,
     "cuFFT allocates its plans' workspaces outside PyTorch's allocator: treat a RuntimeError naming CUFFT_ALLOC_FAILED "
     "as an OOM where the code catches OutOfMemoryError, or make the plans before memory fills"},
    {"cusolver", {"cusolver_status_alloc_failed", "", "", ""}, "device", "cuSOLVER (its handle or workspace)", false,
     false,
     "cuSOLVER allocates outside PyTorch's allocator: treat a RuntimeError naming CUSOLVER_STATUS_ALLOC_FAILED as an "
     "OOM where the code catches OutOfMemoryError"},
    {"cusparse", {"cusparse_status_alloc_failed", "", "", ""}, "device", "cuSPARSE (its handle or workspace)", false,
     false,
     "cuSPARSE allocates outside PyTorch's allocator: treat a RuntimeError naming CUSPARSE_STATUS_ALLOC_FAILED as an "
     "OOM where the code catches OutOfMemoryError"},
    {"nccl", {"cuda failure 'out of memory'", "ncclsystemerror: out of memory", "", ""}, "device",
     "NCCL (its communicators' buffers)", false, false,
     "NCCL allocates its buffers with cudaMalloc when a communicator is made (the first collective) and raises its "
     "own error: make the process group and run one collective before memory fills, or lower NCCL_BUFFSIZE; "
     "an OOM in NCCL leaves the communicator unusable, so restart from a checkpoint rather than retry"},
    {"host", {"defaultcpuallocator: can't allocate memory", "", "", ""}, "host", "the CPU allocator (host memory)",
     false, false,
     "host memory ran out (the CPU allocator's RuntimeError, not OutOfMemoryError): pinned buffers, DataLoader "
     "workers' prefetch and CPU copies of checkpoints count there; catch it apart from device OOMs"},
};

// Loose words: a line holding them is an OOM message in a job's output (support for an event), but an
// exception's message holding only these is no OOM (a DataLoader worker's "ran out of memory").
inline constexpr std::string_view kLooseWords[] = {"out of memory", "outofmemoryerror", "resource_exhausted"};

// The row whose words `message` holds (any case), or nullptr.
const OomKind* classify(std::string_view message);
// The row named `name`, or nullptr.
const OomKind* kind_named(std::string_view name);
// Whether a line of output is an OOM message: a row's words or the loose words (Attempt::oom_message).
bool is_oom_message(std::string_view line);
// A case-insensitive RE2 pattern matching what is_oom_message matches (graceful_exit's default `message`).
std::string message_pattern();

}  // namespace oomh::oom
