#pragma once
// What a fuzz target asserts beyond "no crash, no sanitizer report": a property the code promises
// (a plan the parser accepted reads back the same). A broken one aborts, which libFuzzer records as a crash.

#include <cstdio>
#include <cstdlib>

#define OOMH_FUZZ_CHECK(cond, what)                                                      \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, what); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
