#pragma once
// The driver double's one table of entry points, as cuGetProcAddress sees them: a base name ("cuMemAlloc"),
// the CUDA version that introduced this flavour of it (3020 for cuMemAlloc_v2, as in cudaTypedefs.h's
// PFN_cuMemAlloc_v3020), whether it is the per-thread-default-stream flavour (_ptsz/_ptds, found only with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), and the exported symbol that implements it.
//
// The table is exported (oomh_cuda_double_procs) so that cuda_double_test can check every row against the
// real cudaTypedefs.h and against dlsym, the habit HAMi-core keeps with its hook-consistency check.

#include <cstddef>

extern "C" {

struct OomhDoubleProc {
  const char* base;     // what a caller passes to cuGetProcAddress
  int version;          // cudaVersion from which this flavour is returned
  int per_thread;       // 1: a _ptsz/_ptds flavour
  const char* symbol;   // the exported name, for dlsym
  void* function;
};

// Returns the table and its length. Not a driver function: only the double has it.
const OomhDoubleProc* oomh_cuda_double_procs(size_t* count);
}
